"""Lattice QCD: gauge fields with 12/8-parameter compression and the Wilson Dirac operator."""

from .dslash import DslashTemplate
from .gamma import GAMMA, GAMMA5
from .gauge import haar_field, pack, plaquette, unitarity_violation, unpack, weak_field
from .lattice import Lattice
from .wilson import SpinorField, WilsonOperator

__all__ = [
    "GAMMA", "GAMMA5", "DslashTemplate", "Lattice", "SpinorField", "WilsonOperator",
    "haar_field", "pack", "plaquette", "unitarity_violation", "unpack", "weak_field",
]
