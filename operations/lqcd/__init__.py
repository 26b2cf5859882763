"""Lattice QCD: gauge fields with 12/8-parameter compression and the Wilson Dirac operator."""

from .distributed import DistributedWilsonOperator
from .dslash import DslashTemplate
from .dslash_multi import MultiDslash
from .gamma import GAMMA, GAMMA5
from .gauge import haar_field, pack, plaquette, unitarity_violation, unpack, weak_field
from .lattice import Lattice
from .partition import Partition
from .wilson import SpinorField, WilsonOperator

__all__ = [
    "GAMMA", "GAMMA5", "DistributedWilsonOperator", "DslashTemplate", "Lattice", "MultiDslash",
    "Partition",
    "SpinorField", "WilsonOperator",
    "haar_field", "pack", "plaquette", "unitarity_violation", "unpack", "weak_field",
]
