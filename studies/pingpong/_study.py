"""The pingpong study's declaration: parameters, outputs, figures, demos.

Source: Gao Yunfeng, "The roll of a table tennis ball", Mechanics in
Engineering 43(5): 753-759, 2021. Defaults are the paper's (section 3).
"""

from engine import TIME, Interval, Output, Parameter, Study, demo_configs

from ._figures import figures
from ._model import solve_point

POSITIVE = dict(lower_open=True)

PARAMETERS = (
    Parameter("mass", "kg", 0.003, Interval(0.0, 1.0, **POSITIVE), "ball mass", "m", label=r"mass $m$"),
    Parameter("radius", "m", 0.02, Interval(0.0, 0.5, **POSITIVE), "ball radius", "r", label=r"radius $r$"),
    Parameter("gravity", "m/s^2", 9.8, Interval(0.0, 100.0, **POSITIVE), "gravitational acceleration", "g",
              label=r"gravity $g$"),
    Parameter("friction", "1", 0.3, Interval(0.0, 2.0, **POSITIVE), "sliding friction coefficient", "mu",
              label=r"friction coefficient $\mu$"),
    Parameter(
        "rolling_resistance", "m", 0.0002, Interval(0.0, 0.01, **POSITIVE),
        "rolling-resistance lever (moment delta*N)", "delta", label=r"rolling resistance $\delta$",
    ),
    Parameter("drag", "1/s", 0.1, Interval(0.0, 10.0), "air drag rate n/(2m)", "beta", label=r"air drag $\beta$"),
    Parameter("initial_speed", "m/s", 1.0, Interval(0.0, 20.0, **POSITIVE), "initial centre speed", "v0",
              label=r"initial speed $v_0$"),
    Parameter(
        "spin_ratio", "1", 1.0, Interval(0.0, 20.0),
        "backspin ratio |r thetadot0 / v0|", "q", label=r"spin ratio $q=|r\dot\theta_0/v_0|$",
    ),
)

OUTPUTS = (
    Output("final_displacement", "m", "resting position of the centre, x_final",
           label=r"final displacement $x_\mathrm{final}$"),
    Output("slide_end_time", "s", "end of sliding, t* (slip reaches zero)", label=r"end of sliding $t^*$"),
    Output("stop_time", "s", "time the ball comes to rest", label=r"stop time $t_\mathrm{stop}$"),
    Output("roll_start_speed", "m/s", "centre speed when rolling starts, xdot(t*)",
           label=r"rolling-start speed $\dot{x}(t^*)$"),
    Output("reverses", "1", "1 if the ball rolls backward (mode 2), 0 if it never reverses (mode 1)",
           label="rolls backward (mode 2)"),
    Output("friction_margin", "1", "largest |F|/(mu N) needed while rolling (<= 1: rolling is consistent)",
           label=r"friction margin $\max|F|/(\mu\,N)$"),
    Output("x", "m", "position of the centre at the sweep's sample times (at rest after the stop)",
           dims=(TIME,), label=r"centre position $x$"),
    Output("x_dot", "m/s", "speed of the centre at the sweep's sample times (zero after the stop)",
           dims=(TIME,), label=r"centre speed $\dot{x}$"),
)


STUDY = Study(
    name="pingpong",
    title="rolling table-tennis ball with backspin",
    source='Gao Yunfeng, "The roll of a table tennis ball", Mechanics in Engineering 43(5), 2021',
    version="1",
    parameters=PARAMETERS,
    outputs=OUTPUTS,
    solve_point=solve_point,
    figures=figures,
    demo_configs=demo_configs(__package__),
)
