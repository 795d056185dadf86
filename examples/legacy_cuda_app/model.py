"""TinyLM: a small pre-norm transformer language model, written the way CUDA-era code was.

Importing this module never touches CUDA; only train.py and utils.py do.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 128
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
SEQ_LEN = 32


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        k = k.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        v = v.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS, seq_len=SEQ_LEN, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[:, : tokens.size(1)]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_model(seed=0):
    """The model with deterministic initial weights."""
    torch.manual_seed(seed)
    return TinyLM()


def example_batch(batch_size=4, seq_len=SEQ_LEN, device="cpu", seed=0):
    """Tokens and next-token targets from a learnable rule (t[i+1] = 3*t[i] + 1 mod VOCAB)."""
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (batch_size, 1), generator=generator)
    steps = torch.arange(seq_len + 1).unsqueeze(0)
    seq = start.clone()
    rows = [start]
    for _ in range(seq_len):
        seq = (3 * seq + 1) % VOCAB
        rows.append(seq)
    tokens = torch.cat(rows, dim=1)[:, : steps.size(1)]
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
