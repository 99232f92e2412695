#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"
#include "tidal/base/threads.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::bitwise_equal;
using testing::gradcheck;
using testing::uniform;

namespace {

Tensor idx(const std::vector<int64_t>& v, const Shape& shape, DType dtype = DType::i64) {
  return from_vector_i64(v, shape).to(dtype);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Tensor meta(const Shape& shape, DType dtype = DType::f32) { return empty(shape, dtype, Device::meta()); }

}  // namespace

// --- topk

TEST(Index, TopKValuesTiesAndNaN) {
  Tensor x = from_vector({1, 3, 3, 2, 0, 5, 5, 5}, {2, 4});
  TopKResult r = topk(x, 2);
  EXPECT_EQ(values(r.values), (std::vector<double>{3, 3, 5, 5}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 2, 1, 2}));  // ties: lower index first
  r = topk(x, 3, -1, /*largest=*/false);
  EXPECT_EQ(values(r.values), (std::vector<double>{1, 2, 3, 0, 5, 5}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{0, 3, 1, 0, 1, 2}));
  r = topk(from_vector({1, 4, 2, 9}, {4}), 3, 0, true, /*sorted=*/false);  // unsorted: index order
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(values(r.values), (std::vector<double>{4, 2, 9}));
  // Along dim 0 of a transposed (non-contiguous) view, and a k past the insertion path (k > 16).
  Tensor y = from_vector({1, 6, 2, 5, 3, 4}, {2, 3}).t();  // (3, 2): [[1, 5], [6, 3], [2, 4]]
  r = topk(y, 2, 0);
  EXPECT_EQ(values(r.values), (std::vector<double>{6, 5, 2, 4}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 0, 2, 2}));
  Tensor big = uniform({3, 40}, 7, -1, 1, false);
  r = topk(big, 20);
  for (int row = 0; row < 3; ++row) {
    std::vector<double> v = values(big.select(0, row));
    std::vector<int64_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = int64_t(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[size_t(a)] > v[size_t(b)]; });
    order.resize(20);
    EXPECT_EQ(ints(r.indices.select(0, row)), order);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r = topk(from_vector({1, nan, 2}, {3}), 2);
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 2}));  // NaN is the largest
  r = topk(from_vector({1, nan, 2}, {3}), 2, 0, false);
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{0, 2}));
  r = topk(idx({4, 9, 1, 9}, {4}), 2);  // integers work too
  EXPECT_EQ(ints(r.values), (std::vector<int64_t>{9, 9}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 3}));
}

TEST(GradcheckIndex, TopK) {
  Tensor a = uniform({3, 5}, 1);
  EXPECT_TRUE(gradcheck([](auto& x) { return topk(x[0], 2).values; }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return topk(x[0], 2, 0, false).values; }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return topk(x[0].t(), 3, 1, true, false).values; }, {a}));
}

// --- gather / scatter_add

TEST(Index, GatherScatterAddValues) {
  Tensor t = from_vector({1, 2, 3, 4}, {2, 2});
  for (DType it : {DType::i64, DType::i32}) {
    EXPECT_EQ(values(gather(t, 1, idx({0, 0, 1, 0}, {2, 2}, it))), (std::vector<double>{1, 1, 4, 3}));
    // PyTorch's scatter_add example: duplicates add up.
    Tensor out = scatter_add(zeros({3, 5}), 0, idx({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5}, it), ones({2, 5}));
    EXPECT_EQ(values(out), (std::vector<double>{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1}));
  }
  // An index smaller than x outside `dim`; a transposed x.
  Tensor x = arange(0, 12, 1, DType::f32).reshape(Shape{3, 4});  // [[0..3], [4..7], [8..11]]
  EXPECT_EQ(values(gather(x, 0, idx({2, 0, 1}, {1, 3}))), (std::vector<double>{8, 1, 6}));
  EXPECT_EQ(values(gather(x.t(), 1, idx({2, 2, 0}, {3, 1}))), (std::vector<double>{8, 9, 2}));
  // self + src with src larger than the index: only the index-shaped corner of src is used.
  Tensor s = scatter_add(ones({2, 3}), 1, idx({2, 2}, {2, 1}), from_vector({10, 99, 20, 99}, {2, 2}));
  EXPECT_EQ(values(s), (std::vector<double>{1, 1, 11, 1, 1, 21}));
  EXPECT_EQ(values(scatter_add(idx({1, 1}, {2}), 0, idx({1, 1}, {2}), idx({5, 6}, {2}))),
            (std::vector<double>{1, 12}));  // integers
}

TEST(GradcheckIndex, GatherAndScatterAdd) {
  Tensor x = uniform({3, 4}, 2), self = uniform({3, 4}, 3), src = uniform({2, 4}, 4), big = uniform({3, 5}, 5);
  for (DType it : {DType::i64, DType::i32}) {
    Tensor i1 = idx({3, 3, 0, 1, 1, 1}, {3, 2}, it);        // dim 1, duplicates
    Tensor i0 = idx({2, 0, 2, 2, 2, 0, 1, 2}, {2, 4}, it);  // dim 0, duplicates
    EXPECT_TRUE(gradcheck([&](auto& v) { return gather(v[0], 1, i1); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return gather(v[0], 0, i0); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return gather(v[0].t(), 0, idx({0, 3, 3}, {3, 1}, it)); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return scatter_add(v[0], 0, i0, v[1]); }, {self, src}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return scatter_add(v[0], 1, i1, v[1]); }, {self, big}));  // src > index
    EXPECT_TRUE(gradcheck(
        [&](auto& v) {
          return scatter_add(v[0].t(), 1, idx({0, 0, 2}, {3, 1}, it), v[1].t());
        },
        {x, big}));
  }
}

// --- index_select / index_add

TEST(Index, IndexSelectIndexAddValues) {
  Tensor x = arange(0, 12, 1, DType::f32).reshape(Shape{3, 4});
  for (DType it : {DType::i64, DType::i32}) {
    EXPECT_EQ(values(index_select(x, 0, idx({2, 0, 2}, {3}, it))),
              (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
    EXPECT_EQ(values(index_select(x, 1, idx({3, 1}, {2}, it))), (std::vector<double>{3, 1, 7, 5, 11, 9}));
    Tensor out = index_add(ones({3, 2}), 0, idx({2, 0, 2}, {3}, it), from_vector({1, 2, 3, 4, 5, 6}, {3, 2}));
    EXPECT_EQ(values(out), (std::vector<double>{4, 5, 1, 1, 7, 9}));
  }
  EXPECT_EQ(values(index_select(x.t(), 0, idx({1}, {}))), (std::vector<double>{1, 5, 9}));  // scalar index
  EXPECT_EQ(index_select(x, 1, idx({}, {0})).shape(), (Shape{3, 0}));
  Tensor narrowed = idx({9, 9, 0, 2, 9}, {5}).narrow(0, 2, 2);  // an index view with an offset
  EXPECT_EQ(values(index_select(x, 0, narrowed)), (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(ints(index_select(idx({5, 6, 7}, {3}), 0, idx({2, 2, 0}, {3}))), (std::vector<int64_t>{7, 7, 5}));
  // bf16 moves bits; index_add adds in f32 and rounds each step.
  Tensor xb = x.to(DType::bf16), i3 = idx({2, 0, 2}, {3});
  EXPECT_TRUE(bitwise_equal(index_select(xb, 0, i3), index_select(x, 0, i3).to(DType::bf16)));
  EXPECT_TRUE(bitwise_equal(index_add(xb, 1, idx({0, 0}, {2}), xb.narrow(1, 0, 2)),
                            index_add(x, 1, idx({0, 0}, {2}), x.narrow(1, 0, 2)).to(DType::bf16)));
  EXPECT_TRUE(bitwise_equal(topk(xb, 2).values, topk(x, 2).values.to(DType::bf16)));
}

TEST(GradcheckIndex, IndexSelectAndIndexAdd) {
  Tensor x = uniform({4, 3}, 6), self = uniform({4, 3}, 7), src = uniform({5, 3}, 8), src1 = uniform({4, 2}, 9);
  for (DType it : {DType::i64, DType::i32}) {
    Tensor i5 = idx({3, 0, 3, 3, 1}, {5}, it), i2 = idx({2, 2}, {2}, it);
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_select(v[0], 0, i5); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_select(v[0], 1, i2); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_select(v[0].t(), 1, i5); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_add(v[0], 0, i5, v[1]); }, {self, src}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_add(v[0], 1, i2, v[1]); }, {self, src1}));
    EXPECT_TRUE(gradcheck([&](auto& v) { return index_add(v[0].t(), 0, i2, v[1].t()); }, {self, src1}));
  }
}

TEST(Index, AccumulationIsDeterministic) {
  // Many duplicates in f32: the sum order is the index order, for any thread count.
  const int64_t n = 20000, rows = 7, c = 48;
  std::vector<int64_t> iv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) iv[size_t(i)] = i * 31 % rows;
  Tensor index = from_vector_i64(iv, {n});
  Tensor src = randn({n, c});
  Tensor self = randn({rows, c});
  Tensor scatter_index = index.unsqueeze(1).expand(Shape{n, c}).contiguous();
  const int saved = num_threads();
  std::vector<Tensor> a, b;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    a.push_back(index_add(self, 0, index, src));
    b.push_back(scatter_add(self, 0, scatter_index, src));
  }
  set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(a[0], a[1]));
  EXPECT_TRUE(bitwise_equal(a[0], a[2]));
  EXPECT_TRUE(bitwise_equal(a[0], b[0]));
  EXPECT_TRUE(bitwise_equal(b[0], b[2]));
  std::vector<float> ref = self.to_vector<float>(), sv = src.to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) ref[size_t(iv[size_t(i)] * c + j)] += sv[size_t(i * c + j)];
  EXPECT_TRUE(bitwise_equal(a[0], from_vector(std::vector<double>(ref.begin(), ref.end()), {rows, c})));
}

// --- argsort / bincount

TEST(Index, ArgsortIsStable) {
  Tensor x = from_vector({3, 1, 2, 1, 3, 0}, {6});
  EXPECT_EQ(ints(argsort(x)), (std::vector<int64_t>{5, 1, 3, 2, 0, 4}));
  EXPECT_EQ(ints(argsort(x, 0, true)), (std::vector<int64_t>{0, 4, 2, 1, 3, 5}));
  EXPECT_EQ(ints(argsort(idx({2, 0, 1, 0, 2, 1}, {6}))), (std::vector<int64_t>{1, 3, 2, 5, 0, 4}));  // expert ids
  EXPECT_EQ(ints(argsort(idx({2, 0, 1, 0}, {4}, DType::i32))), (std::vector<int64_t>{1, 3, 2, 0}));
  Tensor m = from_vector({5, 1, 4, 2, 6, 0}, {2, 3});
  EXPECT_EQ(ints(argsort(m, 0)), (std::vector<int64_t>{1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(ints(argsort(m.t(), 1)), (std::vector<int64_t>{1, 0, 0, 1, 1, 0}));  // rows (5,2) (1,6) (4,0)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ints(argsort(from_vector({nan, 1, 0}, {3}))), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(ints(argsort(from_vector({1, nan, 0}, {3}), 0, true)), (std::vector<int64_t>{1, 0, 2}));
}

TEST(Index, Bincount) {
  EXPECT_EQ(ints(bincount(idx({2, 0, 2, 5}, {4}))), (std::vector<int64_t>{1, 0, 2, 0, 0, 1}));
  EXPECT_EQ(ints(bincount(idx({1, 1}, {2}, DType::i32), 4)), (std::vector<int64_t>{0, 2, 0, 0}));
  EXPECT_EQ(ints(bincount(idx({}, {0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(bincount(idx({}, {0})).shape(), (Shape{0}));
  const std::string m = message_of([] { bincount(idx({1, -3}, {2})); });
  EXPECT_NE(m.find("value -3 at position (1)"), std::string::npos) << m;
}

// --- MoE routing end to end

namespace {

// Qwen3-MoE routing with these ops: router -> softmax -> top-k -> renormalize -> group the (token,
// expert) slots per expert (argsort + bincount) -> gather rows (index_select) -> expert MLPs ->
// weighted index_add back. x (T, C), router (E, C), w_gate (E, H, C), w_down (E, C, H).
Tensor moe_forward(const Tensor& x, const Tensor& router, const Tensor& w_gate, const Tensor& w_down, int64_t k) {
  const int64_t tokens = x.size(0), experts = router.size(0);
  Tensor logits = linear(x, router);                                                     // (T, E)
  Tensor e = exp(sub(logits, max(logits, -1, true).values));                             // softmax from exp/sum/div
  Tensor probs = div(e, sum(e, {-1}, true));                                             // (T, E)
  TopKResult top = topk(probs, k);                                                       // (T, k)
  Tensor weights = div(top.values, sum(top.values, {-1}, true));                         // (T, k) renormalized
  Tensor expert_of_slot = top.indices.reshape(Shape{tokens * k});                        // (T*k)
  Tensor order = argsort(expert_of_slot);                                                // slots grouped by expert
  std::vector<int64_t> counts = bincount(expert_of_slot, experts).to_vector<int64_t>();  // (E)
  Tensor token_of_slot = arange(0, tokens).unsqueeze(1).expand(Shape{tokens, k}).reshape(Shape{tokens * k});
  Tensor sorted_tokens = index_select(token_of_slot, 0, order);                        // (T*k)
  Tensor sorted_weights = index_select(weights.reshape(Shape{tokens * k}), 0, order);  // (T*k)
  Tensor out = zeros(x.shape(), x.dtype());                                            // (T, C)
  int64_t start = 0;
  for (int64_t ex = 0; ex < experts; ++ex) {
    const int64_t n = counts[size_t(ex)];
    if (n == 0) continue;
    Tensor tok = sorted_tokens.narrow(0, start, n);                    // (n)
    Tensor h = linear(index_select(x, 0, tok), w_gate.select(0, ex));  // (n, H)
    Tensor y = linear(mul(h, sigmoid(h)), w_down.select(0, ex));       // (n, C)
    y = mul(y, sorted_weights.narrow(0, start, n).unsqueeze(1));
    out = index_add(out, 0, tok, y);
    start += n;
  }
  return out;
}

}  // namespace

TEST(GradcheckIndex, MoeRoutingEndToEnd) {
  const int64_t tokens = 6, c = 4, experts = 4, hidden = 3, k = 2;
  Tensor x = uniform({tokens, c}, 21), router = uniform({experts, c}, 22, -2, 2);
  Tensor w_gate = uniform({experts, hidden, c}, 23), w_down = uniform({experts, c, hidden}, 24);
  EXPECT_TRUE(gradcheck([&](auto& v) { return moe_forward(v[0], v[1], v[2], v[3], k); }, {x, router, w_gate, w_down}));
  // Against a per-token loop over the chosen experts.
  Tensor out = moe_forward(x, router, w_gate, w_down, k);
  Tensor logits = linear(x, router);
  Tensor probs = div(exp(logits), sum(exp(logits), {-1}, true));
  TopKResult top = topk(probs, k);
  EXPECT_TRUE(bitwise_equal(gather(probs, 1, top.indices), top.values));
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < tokens; ++t) {
    Tensor acc = zeros({c}, DType::f64);
    const double norm = sum(top.values.select(0, t)).item<double>();
    for (int64_t j = 0; j < k; ++j) {
      const int64_t ex = top.indices.select(0, t).select(0, j).item<int64_t>();
      Tensor h = linear(x.select(0, t), w_gate.select(0, ex));
      Tensor y = linear(mul(h, sigmoid(h)), w_down.select(0, ex));
      acc = add(acc, mul(y, top.values.select(0, t).select(0, j).item<double>() / norm));
    }
    rows.push_back(acc);
  }
  EXPECT_TRUE(all_close(out, stack(rows, 0), 1e-12, 1e-12));
}

// --- meta device and bad input

TEST(Index, MetaShapes) {
  Tensor x = meta({4096, 64}).set_requires_grad(true);
  TopKResult r = topk(x, 8);
  EXPECT_TRUE(r.values.is_meta() && r.indices.is_meta());
  EXPECT_EQ(r.indices.shape(), (Shape{4096, 8}));
  EXPECT_EQ(r.indices.dtype(), DType::i64);
  Tensor g = gather(x, 1, r.indices);
  EXPECT_EQ(g.shape(), (Shape{4096, 8}));
  Tensor flat = r.indices.reshape(Shape{4096 * 8});
  Tensor order = argsort(flat);
  EXPECT_EQ(order.shape(), (Shape{4096 * 8}));
  EXPECT_EQ(bincount(flat, 64).shape(), (Shape{64}));
  Tensor h = meta({4096, 256}).set_requires_grad(true);
  Tensor sel = index_select(h, 0, order);
  EXPECT_EQ(sel.shape(), (Shape{4096 * 8, 256}));
  Tensor back = index_add(meta({4096, 256}), 0, order, sel);
  EXPECT_EQ(back.shape(), (Shape{4096, 256}));
  Tensor sc = scatter_add(meta({4096, 64}), 1, r.indices, g);
  EXPECT_EQ(sc.shape(), (Shape{4096, 64}));
  sum(add(sum(r.values), add(sum(g), add(sum(back), sum(sc))))).backward(meta({}));
  EXPECT_TRUE(x.grad().is_meta());
  EXPECT_EQ(x.grad().shape(), (Shape{4096, 64}));
  EXPECT_EQ(h.grad().shape(), (Shape{4096, 256}));
}

TEST(Index, BadInput) {
  Tensor x = zeros({3, 4});
  std::string m = message_of([&] { gather(x, 1, idx({0, 4, 1}, {3, 1})); });
  EXPECT_NE(m.find("[gather] index 4 at position (1, 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 4)"), std::string::npos) << m;
  m = message_of([&] { index_select(x, 0, idx({0, -1}, {2}, DType::i32)); });
  EXPECT_NE(m.find("[index_select] index -1 at position (1)"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 3)"), std::string::npos) << m;
  m = message_of([&] { index_add(x, 0, idx({3}, {1}), zeros({1, 4})); });
  EXPECT_NE(m.find("[index_add] index 3"), std::string::npos) << m;
  m = message_of([&] { scatter_add(x, 0, idx({0, 5}, {1, 2}), zeros({1, 2})); });
  EXPECT_NE(m.find("[scatter_add] index 5 at position (0, 1)"), std::string::npos) << m;
  // Shapes that do not fit name both shapes.
  m = message_of([&] { gather(x, 1, idx({0}, {1})); });
  EXPECT_NE(m.find("(1)"), std::string::npos);
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  m = message_of([&] { index_add(x, 0, idx({0, 1}, {2}), zeros({3, 4})); });
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 4)"), std::string::npos) << m;
  EXPECT_THROW(gather(x, 0, idx({0, 0, 0, 0, 0}, {1, 5})), Error);                      // larger than x outside dim
  EXPECT_THROW(gather(x, 2, idx({0}, {1, 1})), Error);                                  // bad dim
  EXPECT_THROW(gather(x, 0, from_vector({0}, {1, 1})), Error);                          // float index
  EXPECT_THROW(scatter_add(x, 0, idx({0, 0}, {1, 2}), zeros({1, 1})), Error);           // index larger than src
  EXPECT_THROW(scatter_add(x, 0, idx({0}, {1, 1}), zeros({1, 1}, DType::f64)), Error);  // dtypes differ
  EXPECT_THROW(index_select(x, 0, idx({0, 1}, {1, 2})), Error);                         // 2-D index
  EXPECT_THROW(index_select(scalar_tensor(1.0), 0, idx({0}, {1})), Error);
  EXPECT_THROW(topk(x, 5), Error);
  EXPECT_THROW(topk(x, -1), Error);
  EXPECT_THROW(bincount(idx({0}, {1, 1})), Error);
  EXPECT_THROW(bincount(from_vector({0}, {1})), Error);
  EXPECT_THROW(gather(x, 0, empty({1, 1}, DType::i64, Device::meta())), Error);  // devices differ
  // Out-of-range checks run before any write: the input is untouched.
  Tensor self = ones({2, 2});
  EXPECT_THROW(index_add(self, 0, idx({0, 2}, {2}), ones({2, 2})), Error);
  EXPECT_EQ(values(self), (std::vector<double>{1, 1, 1, 1}));
}

}  // namespace tidal
