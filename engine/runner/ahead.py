"""A run's solver program made ready ahead of its tasks.

A warm process spends much of a small run getting its program: on 2 cores, of
a 4,096-point pingpong run's 1.2 s, 0.15 s lowering the exported program and
0.33 s reading XLA's executable from the compile cache. The read releases the
GIL; started on a thread of its own as soon as the plan is made, it overlaps
the rest of the run's preparation (the store's modules imported, the store
created) instead of following it. The tasks call the same program and wait
for it, so their results are the bits they would be without it. Where an
earlier process kept the program's executable (engine.solve.executables),
that thread loads it and nothing is lowered here at all.
"""


import engine.stages as stages
from engine.errors import ConfigError
from engine.runner.cost import check_memory, program_calls
from engine.solve.base import Plan
from engine.solve.device import on_platform
from engine.solve.evaluate import load_ahead
from engine.sweep.config import Sweep


def load_programs(sweep: Sweep, plan: Plan) -> list:
    """Start making the programs of the sweep's tasks: its grid's, and with
    [critical] its root search's. Each is made for its calls' kinds of
    arguments, as engine.runner.shard passes them, on the device it calls: a
    grid task passes the sweep's fixed parameters as broadcast views, a root
    search every parameter as a column (its points picked by index) and only
    the critical output. Returns the compiling threads (none for a program
    ready or being made), or none at all on more devices than one (each
    thread's calls then have a device of their own, and a program of their own)."""
    if plan.device.count > 1:
        return []
    with on_platform(plan.device.platform):  # where the tasks' calls run (engine.runner.shard.run_task)
        started = [load_ahead(sweep.study, sweep.solver, params, outputs, plan=plan)
                   for params, outputs in program_calls(sweep)]
    return [thread for thread in started if thread is not None]


def load_ahead_of_run(sweep: Sweep, plan: Plan, executor: str, overwrite: bool) -> list:
    """load_programs, where a run solves in this process (`executor`, the
    run's: "inline"), starts a cube afresh (a resumed one may have nothing left
    to solve, and a load nobody calls would only add to its time) and a task of
    it fits in memory (else the run stops with that error before any work)."""
    if executor != "inline" or not (overwrite or not sweep.out.exists()):
        return []
    try:
        check_memory(sweep, 1, plan)
    except ConfigError:  # the run refuses it (and says why) before making its store: nothing to load
        return []
    with stages.stage("program"):
        return load_programs(sweep, plan)
