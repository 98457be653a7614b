"""Type stubs of the mxmoe Python package (see mxmoe/__init__.py for the documentation)."""

import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
__all__: List[str]

# An array-like: a NumPy array, a PyTorch CPU tensor, anything with __array__ / DLPack / the
# buffer protocol. Floats: float32, float16 or bfloat16; packed data and scales: uint8.
ArrayLike = Any
_Path = Union[str, "os.PathLike[str]"]

def quantize(
    x: ArrayLike,
    format: str,
    scale_mode: Optional[str] = None,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> Tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]: ...
def dequantize(
    packed: ArrayLike,
    scales: ArrayLike,
    format: str,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> npt.NDArray[np.float32]: ...
def qdq(
    x: ArrayLike,
    format: str,
    scale_mode: Optional[str] = None,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> npt.NDArray[np.float32]: ...

class MoeLayer:
    def __init__(
        self,
        w13_weight: ArrayLike,
        w13_weight_scale: ArrayLike,
        w2_weight: ArrayLike,
        w2_weight_scale: ArrayLike,
        scheme: str,
        *,
        top_k: int,
        activation: str = "silu",
        renormalize: bool = True,
        scoring: str = "softmax",
        w13_bias: Optional[ArrayLike] = None,
        w2_bias: Optional[ArrayLike] = None,
        e_score_correction_bias: Optional[ArrayLike] = None,
        expert_map: Optional[ArrayLike] = None,
        n_group: Optional[int] = None,
        topk_group: Optional[int] = None,
        routed_scaling_factor: float = 1.0,
        apply_router_weight_on_input: bool = False,
        scale_mode: Optional[str] = None,
    ) -> None: ...
    @classmethod
    def load(cls, path: _Path) -> "MoeLayer": ...
    def save(self, path: _Path) -> None: ...
    @property
    def scheme(self) -> str: ...
    @property
    def weight_format(self) -> str: ...
    @property
    def activation_format(self) -> Optional[str]: ...
    @property
    def activation(self) -> str: ...
    @property
    def scale_mode(self) -> str: ...
    @property
    def hidden(self) -> int: ...
    @property
    def inter(self) -> int: ...
    @property
    def n_experts(self) -> int: ...
    @property
    def local_experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def renormalize(self) -> bool: ...
    @property
    def scoring(self) -> str: ...
    @property
    def n_group(self) -> Optional[int]: ...
    @property
    def topk_group(self) -> Optional[int]: ...
    @property
    def routed_scaling_factor(self) -> float: ...
    @property
    def apply_router_weight_on_input(self) -> bool: ...
    @property
    def weight_bytes(self) -> int: ...
    @property
    def w13_weight(self) -> npt.NDArray[np.uint8]: ...
    @property
    def w13_weight_scale(self) -> npt.NDArray[np.uint8]: ...
    @property
    def w2_weight(self) -> npt.NDArray[np.uint8]: ...
    @property
    def w2_weight_scale(self) -> npt.NDArray[np.uint8]: ...
    @property
    def w13_bias(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def w2_bias(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def e_score_correction_bias(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def expert_map(self) -> Optional[npt.NDArray[np.int32]]: ...

def moe(
    layer: MoeLayer,
    hidden_states: ArrayLike,
    router_logits: ArrayLike,
    backend: str = "cpu",
    accumulate: str = "f64",
    intermediate: str = "f32",
    *,
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.int32], npt.NDArray[np.float32]]: ...
def verify(
    layer: MoeLayer,
    hidden_states: ArrayLike,
    router_logits: ArrayLike,
    output: ArrayLike,
    topk_ids: Optional[ArrayLike] = None,
    topk_weights: Optional[ArrayLike] = None,
    *,
    tolerance: float = 1e-2,
    profile: Optional[str] = None,
    stages: Optional[Dict[str, ArrayLike]] = None,
) -> Dict[str, Any]: ...
def backends() -> Dict[str, Dict[str, Any]]: ...
def info() -> Dict[str, Any]: ...
