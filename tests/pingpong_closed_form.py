"""The rolling ball's closed form, under the name the tests import: the study's
own (studies/pingpong/closed_form.py: numpy and scipy only, independent of the
engine), which its figures draw beside the solver's curves."""

import sys

from studies.pingpong import closed_form

sys.modules[__name__] = closed_form
