#include "cornstarch/model/cp_attention.h"

#include <torch/torch.h>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// `index` [B, L] -> [B, (H,) L, (D)] broadcast along the head and feature dims of a [B, H, L, D] tensor.
torch::Tensor Expand(const torch::Tensor& index, const torch::Tensor& like) {
  return index.unsqueeze(1).unsqueeze(3).expand({like.size(0), like.size(1), index.size(1), like.size(3)});
}

// `index` [B, L] -> [B, H, L] along the rows of a [B, H, L] tensor (the log-sum-exp's).
torch::Tensor ExpandRows(const torch::Tensor& index, const torch::Tensor& like) {
  return index.unsqueeze(1).expand({like.size(0), like.size(1), index.size(1)});
}

// `rows` ([B, H, L, D], or [B, H, L] for the log-sum-exp) at this rank's positions `mine` [B, L] of a sequence of
// `seq_len`, zeros elsewhere.
torch::Tensor PlaceRows(const torch::Tensor& rows, const torch::Tensor& mine, int64_t seq_len) {
  std::vector<int64_t> shape = rows.sizes().vec();
  shape[2] = seq_len;
  const torch::Tensor index = rows.dim() == 4 ? Expand(mine, rows) : ExpandRows(mine, rows);
  return torch::zeros(shape, rows.options()).scatter_(2, index, rows);
}

// The full-sequence tensor with `pieces[r]` ([B, H, L, D]) scattered to rank r's tokens.
torch::Tensor Place(const torch::Tensor& pieces, const torch::Tensor& tokens, int64_t seq_len) {
  const torch::Tensor first = pieces[0];
  torch::Tensor full = torch::zeros({first.size(0), first.size(1), seq_len, first.size(3)}, first.options());
  for (int64_t r = 0; r < tokens.size(0); ++r) full.scatter_(2, Expand(tokens[r], first), pieces[r]);
  return full;
}

// K and V of every rank's tokens in one all-gather: [cp, 2 (k, v), B, Hkv, L, D].
torch::Tensor AllGatherKv(const torch::Tensor& k, const torch::Tensor& v, Communicator& comm) {
  const torch::Tensor kv = torch::stack({k, v});
  torch::Tensor out = torch::empty({comm.size() * kv.numel()}, kv.options());
  comm.AllGather(kv, out);
  std::vector<int64_t> shape = {comm.size()};
  for (int64_t d : kv.sizes()) shape.push_back(d);
  return out.view(shape);
}

// dK and dV of the whole sequence summed over the ranks, each rank receiving its own tokens' rows: one
// reduce-scatter of the rows laid out rank by rank (half the bytes of an all-reduce, and one call for both).
std::pair<torch::Tensor, torch::Tensor> ReduceScatterKv(const torch::Tensor& dk, const torch::Tensor& dv,
                                                        const torch::Tensor& tokens, Communicator& comm) {
  std::vector<torch::Tensor> pieces;  // rank r's rows of dK and dV: [2, B, Hkv, L, D]
  for (int64_t r = 0; r < tokens.size(0); ++r) {
    const torch::Tensor index = Expand(tokens[r], dk);
    pieces.push_back(torch::stack({dk.gather(2, index), dv.gather(2, index)}));
  }
  const torch::Tensor all = torch::stack(pieces);
  torch::Tensor mine = torch::empty(all.sizes().slice(1), all.options());
  comm.ReduceScatter(all, mine, ReduceOp::kSum);
  return {mine[0], mine[1]};
}

BitfieldAttentionOptions LocalQueryTiles(const torch::Tensor& local_tokens, int64_t seq_len) {
  BitfieldAttentionOptions o;
  const int64_t nq = (seq_len + o.tile_q - 1) / o.tile_q;
  const torch::Tensor t = local_tokens.contiguous();
  for (int64_t b = 0; b < t.size(0); ++b) {
    std::vector<uint8_t> flags(static_cast<size_t>(nq), 0);
    const int64_t* p = t[b].data_ptr<int64_t>();
    for (int64_t i = 0; i < t.size(1); ++i) flags[static_cast<size_t>(p[i] / o.tile_q)] = 1;
    o.query_tiles.push_back(std::move(flags));
  }
  return o;
}

class CpAttentionFunction : public torch::autograd::Function<CpAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& words, const torch::Tensor& tokens,
                               Communicator* comm) {
    const int rank = comm->rank();
    const int64_t n = words.size(1);
    const torch::Tensor mine = tokens[rank];
    const torch::Tensor q_full = PlaceRows(q, mine, n);
    const torch::Tensor kv = AllGatherKv(k, v, *comm);
    const torch::Tensor k_full = Place(kv.select(1, 0), tokens, n), v_full = Place(kv.select(1, 1), tokens, n);
    auto [out, lse] = BitfieldAttentionForward(q_full, k_full, v_full, words, LocalQueryTiles(mine, n));
    const torch::Tensor out_mine = out.gather(2, Expand(mine, q));
    // Queries, output and log-sum-exp are kept at this rank's positions only and placed again in backward, with
    // zeros elsewhere: in a kernel tile shared with another rank, that rank's rows then have q = 0 and lse = 0, so
    // a finite P (1 where allowed), and a zero output gradient, so D = 0 and dS = 0: they add nothing to dK and dV
    // (a kernel that adds a bias or dropout would break this). Keeping them whole would hold (cp - 1) / cp of the
    // sequence twice over in every block (measured).
    ctx->save_for_backward({q, k_full, v_full, words, out_mine, lse.gather(2, ExpandRows(mine, lse)), tokens});
    // The communicator belongs to the DistRuntime, which outlives every step's backward.
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return out_mine;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k_full = s[1], &v_full = s[2], &words = s[3], &out_mine = s[4], &lse_mine = s[5];
    const torch::Tensor& tokens = s[6];
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const torch::Tensor mine = tokens[comm->rank()];
    const int64_t n = words.size(1);
    const torch::Tensor q_full = PlaceRows(q, mine, n), out = PlaceRows(out_mine, mine, n);
    const torch::Tensor lse = PlaceRows(lse_mine, mine, n), dout = PlaceRows(grads[0], mine, n);
    auto [dq, dk, dv] = BitfieldAttentionBackward(q_full, k_full, v_full, words, out, lse, dout,
                                                  LocalQueryTiles(mine, n));
    auto [dk_mine, dv_mine] = ReduceScatterKv(dk, dv, tokens, *comm);
    return {dq.gather(2, Expand(mine, grads[0])), dk_mine, dv_mine, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CpBitfieldAttention(const torch::Tensor& q_local, const torch::Tensor& k_local,
                                  const torch::Tensor& v_local, const torch::Tensor& words, const CpLayout& layout,
                                  Communicator& cp) {
  CS_CHECK(cp.size() == layout.cp, "cp group of ", cp.size(), " for a layout of ", layout.cp);
  if (layout.cp == 1) return BitfieldAttention(q_local, k_local, v_local, words);
  // fp32 kernels, as BitfieldAttention: widened where autograd sees the casts.
  return CpAttentionFunction::apply(q_local.to(torch::kFloat), k_local.to(torch::kFloat), v_local.to(torch::kFloat),
                                    words, layout.tokens, &cp);
}

}  // namespace cornstarch
