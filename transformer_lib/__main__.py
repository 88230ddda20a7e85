"""``python -m transformer_lib``: version, chosen device, and a one-line self-check."""
import torch

from . import MultiHeadAttention, __version__, get_device, seed_everything


def self_check(device) -> str:
    """Our multi-head attention against torch.nn.MultiheadAttention on random input."""
    seed_everything(0)
    ref = torch.nn.MultiheadAttention(32, 4, batch_first=True).to(device).eval()
    ours = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(2, 7, 32, device=device)
    with torch.no_grad():
        diff = (ours(x)[0] - ref(x, x, x, need_weights=False)[0]).abs().max().item()
    return f"self-check {'OK' if diff < 1e-5 else 'FAILED'}: MultiHeadAttention vs torch.nn.MultiheadAttention max |diff| = {diff:.1e}"


if __name__ == "__main__":
    device = get_device()
    print(f"transformer_lib {__version__} | torch {torch.__version__} | device {device}")
    print(self_check(device))
