"""``decode.compile``: greedy and beam search through a compiled decoder step.

A search calls its model's incremental step once per output position. For the LSTM that step keeps its shapes from
step to step (beams x sentences, and the source length, fixed by the encoder output) and reads nothing on the host, so
``torch.compile`` takes it whole and ``mode="reduce-overhead"`` replays it as CUDA graphs on a GPU
(``LSTMModel.compile_search_step``). A Transformer's incremental step appends to its key/value cache, so its shapes
grow every step: it is refused there, with the reason, rather than compiled once per output length.
"""

from __future__ import annotations

from mma_nmt.config_types import compile_options

# the model architectures whose search step compiles (ModelConfig.arch)
COMPILED_SEARCH_ARCHS = ("lstm",)


def check_search_compile(mode, arch: str) -> None:
    """Refuses ``decode.compile = mode`` for a model of architecture ``arch`` whose search step cannot take it."""
    if compile_options(mode) is not None and arch not in COMPILED_SEARCH_ARCHS:
        raise ValueError(f"decode.compile={mode!r} applies to the LSTM models only: a {arch} model's incremental step "
                         f"grows its key/value cache at every output position, so it would compile once per position; "
                         f"set decode.compile=false")


def apply_search_compile(model, mode) -> None:
    """Gives ``model`` the search step ``decode.compile = mode`` asks for: compiled in that mode, or eager (false).
    The step compiled for the same mode before is kept, with its graphs."""
    options = compile_options(mode)
    compile_step = getattr(model, "compile_search_step", None)
    if compile_step is None:
        check_search_compile(mode, getattr(getattr(model, "config", None), "arch", type(model).__name__))
        return
    compile_step(options)
