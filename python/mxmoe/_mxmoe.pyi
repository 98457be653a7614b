"""The native half of mxmoe (PyO3). Internal: use the functions of the `mxmoe` package, which
check and convert arrays before calling these with bytes and shapes."""

from typing import Any, Dict, List, Optional, Tuple

__version__: str

class Layer:
    @staticmethod
    def load(path: str) -> "Layer": ...
    @staticmethod
    def from_parts(
        w13: bytes,
        w13_scale: bytes,
        w2: bytes,
        w2_scale: bytes,
        experts: int,
        hidden: int,
        inter: int,
        scheme: str,
        activation: str,
        top_k: int,
        renormalize: bool,
        scoring: str,
        scale_mode: str,
        routed_scaling_factor: float,
        apply_router_weight_on_input: bool,
        n_group: Optional[int] = None,
        topk_group: Optional[int] = None,
        w13_bias: Optional[bytes] = None,
        w2_bias: Optional[bytes] = None,
        e_score_correction_bias: Optional[bytes] = None,
        expert_map: Optional[bytes] = None,
    ) -> "Layer": ...
    def save(self, path: str) -> None: ...
    def config(self) -> Dict[str, Any]: ...
    def weights(self) -> Dict[str, Tuple[bytearray, List[int], str]]: ...

def format_spec(format: str) -> Tuple[str, int, int]: ...
def scheme_spec(scheme: str) -> Tuple[str, str, Optional[str]]: ...
def scale_mode_name(scale_mode: str) -> str: ...
def quantize(
    data: bytes, shape: List[int], format: str, scale_mode: str, backend: str,
    adapter: Optional[str] = None, profile: str = "contract",
) -> Tuple[bytearray, bytearray]: ...
def dequantize(
    packed: bytes, scales: bytes, shape: List[int], format: str, backend: str,
    adapter: Optional[str] = None, profile: str = "contract",
) -> bytearray: ...
def qdq(
    data: bytes, k: int, format: str, scale_mode: str, backend: str,
    adapter: Optional[str] = None, profile: str = "contract",
) -> bytearray: ...
def moe(
    layer: Layer, hidden: bytes, logits: bytes, backend: str, accumulate: str,
    intermediate: str, adapter: Optional[str] = None, profile: str = "contract",
) -> Tuple[bytearray, bytearray, bytearray, int]: ...
def verify(
    layer: Layer, hidden: bytes, logits: bytes, output: bytes,
    topk_ids: Optional[bytes] = None, topk_weights: Optional[bytes] = None,
    tolerance: float = 1e-2, profile: str = "contract",
    stages: Optional[List[Tuple[str, bytes]]] = None,
) -> Dict[str, Any]: ...
def backends() -> Dict[str, Dict[str, Any]]: ...
def info() -> Dict[str, Any]: ...
