"""The study layer: what a study declares (parameters, outputs, its point
function, demo sweeps, figures) and the status codes a point's solve returns.
It imports nothing else of the engine's."""
