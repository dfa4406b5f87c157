"""Attention written out in torch float64 for the CPU tests that check tests/gpu/oracle.py's
forward and backward against autograd (test_oracle.py, test_dropout.py): a loop over sequences
and query heads, nothing shared with the oracle but the inputs."""

import math


def autograd_attention(torch, q, k, v, do, q_lens, kv_lens, scale, visible=None, softcap=0.0, sinks=None,
                       alibi=None, keep=None, rescale=1.0):
    """O of every (sequence, query head) and dQ, dK, dV of sum(O * dO) by torch's float64
    autograd. q [b, s_q, h, d], k [b, s, h_kv, d], v [b, s, h_kv, dv], do [b, s_q, h, dv]
    (NumPy); visible(i, lq, lk) a [lq, lk] bool mask or None; sinks, alibi per query head; keep
    [b, h, s_q, s] the dropout mask, its kept probabilities times rescale. Returns ({(i, head):
    O [lq, dv]}, (dq, dk, dv))."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    h, h_kv = q.shape[2], k.shape[2]
    outs, loss = {}, 0
    for i in range(q.shape[0]):
        lq, lk = int(q_lens[i]), int(kv_lens[i])
        for head in range(h):
            kv = head // (h // h_kv)
            t = scale * tq[i, :lq, head] @ tk[i, :lk, kv].T
            if softcap:
                t = softcap * torch.tanh(t / softcap)
            if alibi is not None:
                dist = (torch.arange(lq)[:, None] + (lk - lq) - torch.arange(lk)[None, :]).abs()
                t = t - float(alibi[head]) * dist
            if visible is not None:
                t = t.masked_fill(~torch.from_numpy(visible(i, lq, lk)), -math.inf)
            if sinks is not None:
                t = torch.cat([t, torch.full((lq, 1), float(sinks[head]), dtype=t.dtype)], dim=1)
            p = torch.softmax(t, dim=-1).nan_to_num(0.0)[:, :lk]
            if keep is not None:
                p = p * torch.from_numpy(keep[i, head, :lq, :lk]).double() * rescale
            o = p @ tv[i, :lk, kv]
            outs[(i, head)] = o.detach().numpy()
            loss = loss + (o * torch.from_numpy(do[i, :lq, head])).sum()
    loss.backward()
    return outs, (tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy())
