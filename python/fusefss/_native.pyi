"""Type stubs of ``fusefss._native``, the Rust extension that ``fusefss`` wraps.

Records cross as JSON text, arrays as little-endian bytes (``fusefss`` turns them into
numpy arrays). Use the package ``fusefss``, not this module.
"""

from os import PathLike
from typing import Callable, List, Optional, Tuple, Union

class FusefssError(Exception):
    """An error from fusefss: its message is the Rust error's, with its context."""

_RunOut = Tuple[str, bytes, bytes, Optional[bytes]]

class NativeModel:
    def __init__(self, name: str, implementation: str, layers: Optional[int] = None, keys_in_memory: bool = False) -> None: ...
    def info(self) -> str: ...
    def tokenize(self, text: str, seq: Optional[int] = None) -> List[int]: ...
    def decode(self, ids: List[int]) -> str: ...
    def prompt(self, prompt: str, chat: bool) -> List[int]: ...
    def input(self, ids: List[int]) -> bytes: ...
    def run(
        self,
        tokens: Optional[List[int]] = None,
        ring: Optional[bytes] = None,
        real: Optional[bytes] = None,
        secure: bool = True,
        reference: bool = False,
        progress: Optional[Callable[[int, int], object]] = None,
    ) -> _RunOut: ...
    def embed(
        self,
        texts: List[str],
        secure: bool = True,
        reference: bool = False,
        progress: Optional[Callable[[int, int, int], object]] = None,
    ) -> List[_RunOut]: ...
    def generate(
        self,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        chat: bool,
        keys_in_memory: bool,
        keys_dir: Optional[Union[str, PathLike[str]]] = None,
        keys_streamed: bool = False,
        keys_on_disk: bool = False,
    ) -> NativeGeneration: ...

class NativeGeneration:
    def next_event(self) -> Optional[Tuple[str, str]]: ...
    def close(self) -> None: ...

class NativeClient:
    def __init__(self, servers: List[str], tls_dir: Union[str, PathLike[str]], timeout_s: float) -> None: ...
    def run(
        self,
        model: NativeModel,
        tokens: Optional[List[int]] = None,
        ring: Optional[bytes] = None,
        real: Optional[bytes] = None,
        check: bool = True,
    ) -> _RunOut: ...
    def generate(
        self,
        model: NativeModel,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        chat: bool,
        check: bool,
        hide_length: bool,
    ) -> NativeGeneration: ...

def compile_spec(spec_json: str, options: List[str]) -> str: ...
def bench_ops(argv: List[str], spec_json: Optional[str] = None, on_row: Optional[Callable[[str], object]] = None) -> List[str]: ...
def bench_model(argv: List[str], progress: Optional[Callable[[int, int], object]] = None) -> List[str]: ...
def wipe_kept() -> None: ...
