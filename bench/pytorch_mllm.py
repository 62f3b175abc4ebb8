#!/usr/bin/python3
"""The model of a cornstarch benchmark config, trained in plain PyTorch eager: the other side of bench/vs_pytorch.sh.

What a user would otherwise write: a Llama-style LLM (RMSNorm, RoPE, grouped-query attention, SwiGLU) over a
SigLIP-style vision tower (patch convolution, learned positions, pre-LN blocks with a tanh-GELU MLP, final LayerNorm)
and an MLP projector; attention as matmul + dense boolean mask + softmax + matmul; cross-entropy over the full logits;
torch.optim.AdamW with gradient clipping. Frozen modules get requires_grad = False, as in a typical fine-tuning
script. The sample layout is cornstarch's synthetic one with every sample filling seq_len: BOS, prompt, the image's
patch tokens, SEP, the answer tokens, EOS; labels on the answers only. Text tokens attend causally to every earlier
token, image tokens to their own image only (both directions).

Not part of CI and never part of training: Debian's python3-torch (1.13) runs it to reproduce the comparison.
Prints one JSON line per step ({"step", "seconds", "loss"}) and a last line with the peak resident memory.

  /usr/bin/python3 bench/pytorch_mllm.py --config configs/bench/w1.yaml [--steps N] [--threads T]
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq_len, head_dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], -1).float()
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def attention(q, k, v, mask):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


class DecoderBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.heads, self.kv_heads = c["hidden_size"], c["num_heads"], c["num_kv_heads"]
        self.head_dim = d // self.heads
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, d, bias=False)
        ff = c["intermediate_size"]
        self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = apply_rope(self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k = apply_rope(self.k(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        y = x + self.o(attention(q, k, v, mask).transpose(1, 2).reshape(b, s, -1))
        m = self.mlp_norm(y)
        return y + self.down(F.silu(self.gate(m)) * self.up(m))


class EncoderBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.heads = c["hidden_size"], c["num_heads"]
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, c["intermediate_size"]), nn.Linear(c["intermediate_size"], d)
        self.approximate = "tanh" if c.get("hidden_act", "gelu") == "gelu_tanh" else "none"

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        h = x + self.out(attention(q, k, v, None).transpose(1, 2).reshape(n, t, d))
        return h + self.fc2(F.gelu(self.fc1(self.norm2(h)), approximate=self.approximate))


class VisionTower(nn.Module):
    def __init__(self, c, llm_hidden):
        super().__init__()
        d, p = c["hidden_size"], c["patch_size"]
        self.patch = nn.Conv2d(3, d, p, stride=p)
        self.position = nn.Parameter(torch.zeros((c["image_size"] // p) ** 2, d))
        self.blocks = nn.ModuleList(EncoderBlock(c) for _ in range(c["num_layers"]))
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.proj1, self.proj2 = nn.Linear(d, llm_hidden), nn.Linear(llm_hidden, llm_hidden)

    def features(self, images):
        h = self.patch(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            h = block(h)
        return self.norm(h)

    def project(self, features):
        return self.proj2(F.gelu(self.proj1(features)))


class Mllm(nn.Module):
    def __init__(self, llm, vision):
        super().__init__()
        self.vision = VisionTower(vision, llm["hidden_size"])
        self.embed = nn.Embedding(llm["vocab_size"], llm["hidden_size"])
        self.blocks = nn.ModuleList(DecoderBlock(llm) for _ in range(llm["num_layers"]))
        self.norm = RMSNorm(llm["hidden_size"])
        self.head = nn.Linear(llm["hidden_size"], llm["vocab_size"], bias=False)

    def forward(self, ids, images, image_at, labels, cos, sin, mask):
        image = self.vision.project(self.vision.features(images))
        h = self.embed(ids)
        h = torch.cat([h[:, :image_at], image, h[:, image_at + image.shape[1]:]], 1)
        for block in self.blocks:
            h = block(h, cos, sin, mask)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=0, help="default: train.steps of the config")
    parser.add_argument("--threads", type=int, default=0, help="default: every core")
    args = parser.parse_args()
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    llm, vision = cfg["model"]["llm"], cfg["model"]["encoders"]["vision"]
    train, data, opt = cfg["train"], cfg["data"], cfg["optimizer"]
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(train.get("seed", 0))

    model = Mllm(llm, vision)
    if llm.get("frozen", False):
        for module in (model.embed, model.blocks, model.norm, model.head):
            module.requires_grad_(False)
    if vision.get("frozen", False):
        model.vision.patch.requires_grad_(False)
        model.vision.position.requires_grad_(False)
        model.vision.blocks.requires_grad_(False)
        model.vision.norm.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=opt["lr"], weight_decay=opt.get("weight_decay", 0.0))

    # The layout: BOS, prompt, image patches, SEP, one answer per encoder + the joint answer, EOS.
    s, batch = data["seq_len"], train["micro_batch_size"]
    prompt = data["max_prompt_tokens"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    image_at = 1 + prompt
    first_answer = image_at + patches + 1
    assert first_answer + 3 == s, "the config's samples must fill seq_len exactly"
    is_image = torch.zeros(s, dtype=torch.bool)
    is_image[image_at:image_at + patches] = True
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    mask = torch.where(is_image[:, None], is_image[None, :] & is_image[:, None], causal)
    cos, sin = rope_tables(s, llm["hidden_size"] // llm["num_heads"])

    steps = args.steps or train["steps"]
    for step in range(1, steps + 1):
        ids = torch.randint(0, llm["vocab_size"], (batch, s))
        labels = torch.full((batch, s), -100, dtype=torch.long)
        labels[:, first_answer:] = ids[:, first_answer:]
        images = torch.randn(batch, 3, vision["image_size"], vision["image_size"])
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, images, image_at, labels, cos, sin, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, train.get("grad_clip_norm", 1.0))
        optimizer.step()
        seconds = time.perf_counter() - start
        print(json.dumps({"step": step, "seconds": seconds, "loss": loss.item()}), flush=True)
    print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


if __name__ == "__main__":
    main()
