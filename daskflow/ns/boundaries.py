"""Velocity and pressure boundary conditions of the Navier-Stokes problem, and presets.

Each velocity component has, per axis, a two-letter pair (P, D: wall value, N: zero gradient) and
the wall values at the lower and upper ends. The component's placement follows the staggering:
``u`` sits on x-faces, ``v`` on y-faces, ``w`` on z-faces; along the other axes at centres. The
pressure pair per axis is periodic where the flow is, Neumann where the normal velocity is given
(walls), Dirichlet where it has zero gradient (outflow), unless set explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daskflow.bc import BC_PAIRS
from daskflow.run_config import BoundariesConfig, BoundaryOverride

COMPONENTS = ("u", "v", "w")
AXES = ("x", "y", "z")
PRESETS = ("channel", "couette", "cavity", "periodic")


@dataclass(frozen=True)
class ComponentBC:
    """Boundary pairs and wall values of one velocity component along x, y, z."""

    pairs: tuple[str, str, str]
    values: tuple[tuple[float, float], tuple[float, float], tuple[float, float]]

    def stagger(self, component: int) -> str:
        return "".join("f" if axis == component else "c" for axis in range(3))


@dataclass(frozen=True)
class FlowBoundaries:
    u: ComponentBC
    v: ComponentBC
    w: ComponentBC
    p: tuple[str, str, str]
    preset: str = field(default="custom")

    @property
    def components(self) -> tuple[ComponentBC, ComponentBC, ComponentBC]:
        return (self.u, self.v, self.w)

    def periodic(self, axis: int) -> bool:
        return self.p[axis] == "PP"


def _walls(axes: tuple[int, ...], lid: dict | None = None) -> dict:
    """Component settings with no-slip walls on ``axes`` (periodic elsewhere) and moving walls
    ``lid = {(component, axis): (lower, upper)}``."""
    out = {}
    for c, name in enumerate(COMPONENTS):
        pairs = tuple("DD" if axis in axes else "PP" for axis in range(3))
        values = [(0.0, 0.0)] * 3
        for (comp, axis), vals in (lid or {}).items():
            if comp == c:
                values[axis] = vals
        out[name] = {"pairs": pairs, "values": tuple(values)}
    return out


def preset(name: str) -> dict:
    """Component settings of a named preset (see :data:`PRESETS`)."""
    if name == "channel":
        return _walls((2,))
    if name == "couette":
        return _walls((2,), {(0, 2): (-1.0, 1.0)})
    if name == "cavity":
        return _walls((0, 2), {(0, 2): (0.0, 1.0)})
    if name == "periodic":
        return _walls(())
    raise ValueError(f"boundaries.preset must be one of {PRESETS}, got {name!r}")


def pressure_pairs(components: dict) -> tuple[str, str, str]:
    """Pressure pairs implied by the normal velocity of each axis."""
    out = []
    for axis in range(3):
        normal = components[COMPONENTS[axis]]["pairs"][axis]
        if normal == "PP":
            out.append("PP")
        else:
            out.append("".join("N" if letter == "D" else "D" for letter in normal))
    return tuple(out)


def build(section: BoundariesConfig | dict) -> FlowBoundaries:
    """Boundaries from the validated ``boundaries`` config section (typed, or as its dict)."""
    if isinstance(section, dict):
        section = BoundariesConfig.from_dict(section)
    name = section.preset or "channel"
    comps = preset(name)
    for c in COMPONENTS:
        override = getattr(section, c) or BoundaryOverride()
        pairs = list(comps[c]["pairs"])
        values = [list(v) for v in comps[c]["values"]]
        for axis, axis_name in enumerate(AXES):
            if getattr(override, axis_name) is not None:
                pairs[axis] = getattr(override, axis_name)
            if getattr(override, f"{axis_name}_values") is not None:
                values[axis] = list(getattr(override, f"{axis_name}_values"))
        comps[c] = {"pairs": tuple(pairs), "values": tuple(tuple(v) for v in values)}
    p = section.p or BoundaryOverride()
    p_pairs = list(pressure_pairs(comps))
    for axis, axis_name in enumerate(AXES):
        if getattr(p, axis_name) is not None:
            p_pairs[axis] = getattr(p, axis_name)
    for axis, axis_name in enumerate(AXES):
        periodic = [comps[c]["pairs"][axis] == "PP" for c in COMPONENTS] + [p_pairs[axis] == "PP"]
        if any(periodic) and not all(periodic):
            raise ValueError(f"boundaries: axis {axis_name} must be periodic (PP) for u, v, w and p or for none")
        for c in COMPONENTS:
            if comps[c]["pairs"][axis] not in BC_PAIRS:
                raise ValueError(f"boundaries.{c}.{axis_name} must be one of {BC_PAIRS}")
    return FlowBoundaries(*(ComponentBC(**comps[c]) for c in COMPONENTS), tuple(p_pairs), name)
