"""PyTorch with a CUDA device, or the exit status ctest takes for "skipped" (77): what every
gpu-labelled PyTorch test needs first."""
import sys

SKIPPED = 77


def torch_or_skip():
    """The torch module, once it sees a CUDA device; exits 77 with the reason otherwise."""
    try:
        import torch
    except ImportError:
        print("torch is not installed: skipped")
        sys.exit(SKIPPED)
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: skipped")
        sys.exit(SKIPPED)
    return torch
