"""The rotary embedding's facets (``mage.facets``): a model's part needs only what the book reads of it
(its names, its place after the blocks, its marker, and that its size sweep plots against bytes: one
read and one write of x). No backward cost: the operator has no backward, the swap is for inference."""
from mage import facets

from .spec import SPEC

facets.declare(SPEC.name, label="V-JEPA 2 rotary embedding", short="RoPE", order=200, marker="hexagon", work="bytes")
