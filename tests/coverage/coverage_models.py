"""Small models the coverage tests trace (loaded by path: `tests/coverage/coverage_models.py:NAME`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from accelport.coverage import Workload


class Block(nn.Module):
    """Pre-norm block; attention through SDPA, so CPU and meta run different attention kernels."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(attended.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class TinyTransformerLM(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def batch(vocab: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.device("cpu"):
        tokens = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(0))
    return tokens[:, :-1], tokens[:, 1:]


def tiny_lm():
    """A training step: forward, cross-entropy, backward, AdamW (chosen by accelport)."""
    tokens, targets = batch()
    return TinyTransformerLM(), (tokens,), lm_loss, targets


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.emb(tokens))


def encoder_eval():
    """nn.TransformerEncoderLayer, batch_first, eval: inference takes the fused fast path."""
    with torch.device("cpu"):
        tokens = torch.randint(0, 50, (2, 6))
    return Encoder().eval(), (tokens,)


class MaskedSum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y[y > 0].sum()  # boolean-mask indexing: the output size depends on the data


def masked():
    return MaskedSum(), (torch.randn(4, 8),)


class BranchOnItem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum().item() > -1e9:  # a Python branch on a value: only a real run can take it
            return y.relu().sum()
        return y.sum()


def branch_on_item():
    return BranchOnItem(), (torch.randn(4, 8),)


def plain_adam():
    """A Workload whose optimizer leaves foreach unset (as most training scripts do)."""
    tokens, targets = batch()
    return Workload(
        model=TinyTransformerLM(layers=1),
        inputs=(tokens,),
        loss=lm_loss,
        targets=targets,
        optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
    )


def not_a_workload():
    return 42


def amp_step():
    """A step function: bfloat16 autocast on the CPU, backward, SGD with momentum."""
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 4)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def raising_factory():
    """A factory that fails before it returns anything (a missing checkpoint, say)."""
    raise RuntimeError("checkpoint weights.pt not found")


def shape_checked_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    raise ValueError(f"targets {tuple(targets.shape)} do not fit the output {tuple(output.shape)}")


def bad_loss():
    """A model whose loss function always raises."""
    return nn.Linear(4, 2), (torch.randn(3, 4),), shape_checked_loss, torch.zeros(3)


class NoisyEncoder(nn.Module):
    """torch warns when it builds this (norm_first turns the nested-tensor path off) and logs while tracing it."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # What torch's own loggers say under fake tensors (symbolic shapes, dynamo) is not about the step.
        import logging

        logging.getLogger("torch.fx.experimental.symbolic_shapes").warning("tracing-time chatter from torch")
        return self.encoder(x)


def noisy():
    return NoisyEncoder(), (torch.randn(2, 3, 8),)
