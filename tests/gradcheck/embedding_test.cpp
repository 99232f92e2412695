#include "tidal/ops/embedding.h"
#include "tests/support/gradcheck.h"
#include "tidal/base/threads.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"

namespace tidal {
using testing::all_close;
using testing::bitwise_equal;
using testing::gradcheck;
using testing::uniform;

namespace {

Tensor ids_of(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  return from_vector_i64(v, shape).to(dtype);
}

// The dense gradient, summed in increasing position order: what the kernel must match bit for bit.
std::vector<float> reference_grad(const std::vector<int64_t>& ids, const std::vector<float>& g, int64_t vocab,
                                  int64_t c) {
  std::vector<float> out(size_t(vocab * c), 0.f);
  std::vector<bool> seen(size_t(vocab), false);
  for (size_t n = 0; n < ids.size(); ++n) {
    float* row = out.data() + ids[n] * c;
    const float* gr = g.data() + n * size_t(c);
    for (int64_t j = 0; j < c; ++j) row[j] = seen[size_t(ids[n])] ? row[j] + gr[j] : gr[j];
    seen[size_t(ids[n])] = true;
  }
  return out;
}

}  // namespace

TEST(GradcheckEmbedding, DuplicateIdsBothIndexTypes) {
  for (DType it : {DType::i64, DType::i32}) {
    Tensor w = uniform({5, 3}, 1);
    Tensor ids = ids_of({1, 4, 1, 0, 4, 1}, {2, 3}, it);  // duplicates across and within rows
    EXPECT_TRUE(gradcheck([&](auto& x) { return embedding(x[0], ids); }, {w})) << it;
  }
}

TEST(GradcheckEmbedding, NonContiguousInputs) {
  Tensor wt = uniform({3, 6}, 2);                                   // the weight is wt.t(): (6, 3) with strides (1, 6)
  Tensor ids = ids_of({5, 0, 2, 2, 5, 1}, {3, 2}, DType::i64).t();  // (2, 3) transposed view
  ASSERT_FALSE(ids.is_contiguous());
  EXPECT_TRUE(gradcheck([&](auto& x) { return embedding(x[0].t(), ids); }, {wt}));
  Tensor ids0 = ids_of({3}, {}, DType::i64);  // a scalar id -> (C)
  EXPECT_TRUE(gradcheck([&](auto& x) { return embedding(x[0].t(), ids0); }, {wt}));
}

TEST(Embedding, ValuesAndHandComputedGradient) {
  Tensor w = arange(0, 12, 1, DType::f32).reshape(Shape{4, 3});
  Tensor ids = ids_of({3, 0, 3}, {3}, DType::i32);
  Tensor out = embedding(w, ids);
  EXPECT_EQ(out.shape(), (Shape{3, 3}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  Tensor wg = w.detach().clone().set_requires_grad(true);
  Tensor y = embedding(wg, ids);
  y.backward(from_vector({1, 2, 3, 10, 20, 30, 100, 200, 300}, Shape{3, 3}));
  EXPECT_EQ(wg.grad().to_vector<float>(), (std::vector<float>{10, 20, 30, 0, 0, 0, 0, 0, 0, 101, 202, 303}));
  // bf16 rows are copied exactly; their gradient accumulates in f32 and rounds once.
  Tensor wb = w.to(DType::bf16);
  EXPECT_TRUE(bitwise_equal(embedding(wb, ids), out.to(DType::bf16)));
}

// padding_idx (nn.Embedding's, Hugging Face's pad_token_id in the Llama family and Gemma 3): the row is
// looked up as any other but gets no gradient.
TEST(Embedding, PaddingRowGetsNoGradient) {
  Tensor w = arange(0, 12, 1, DType::f32).reshape(Shape{4, 3}).set_requires_grad(true);
  Tensor ids = ids_of({3, 0, 3}, {3}, DType::i64);
  Tensor y = embedding(w, ids, 3);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  y.backward(from_vector({1, 2, 3, 10, 20, 30, 100, 200, 300}, Shape{3, 3}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{10, 20, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(embedding(w, ids, 4), Error);  // outside the 4 rows
}

TEST(Embedding, SavesOnlyTheIds) {
  Tensor w = uniform({7, 4}, 3, -1, 1, true, DType::f32);
  Tensor ids = ids_of({1, 2, 3}, {3}, DType::i64);
  const long w_refs = w.storage().use_count(), id_refs = ids.storage().use_count();
  Tensor y = embedding(w, ids);
  EXPECT_EQ(w.storage().use_count(), w_refs);  // the weight is not kept for backward
  EXPECT_EQ(ids.storage().use_count(), id_refs + 1);
  y.backward(ones_like(y));
  EXPECT_EQ(w.grad().shape(), (Shape{7, 4}));
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  const int64_t vocab = 300, c = 96, n = 4096;
  std::vector<int64_t> idv(static_cast<size_t>(n));  // few distinct ids in two ranges: long duplicate runs
  for (int64_t i = 0; i < n; ++i) idv[size_t(i)] = i * 7919 % 40 + (i / 3) % 2 * 200;
  Tensor ids = from_vector_i64(idv, {n});
  Tensor g = randn({n, c});
  const int saved = num_threads();
  std::vector<Tensor> grads;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor w = zeros({vocab, c}).set_requires_grad(true);
    embedding(w, ids).backward(g);
    grads.push_back(w.grad());
  }
  set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(grads[0], grads[1]));
  EXPECT_TRUE(bitwise_equal(grads[0], grads[2]));
  std::vector<float> r = reference_grad(idv, g.to_vector<float>(), vocab, c);
  Tensor ref = from_vector(std::vector<double>(r.begin(), r.end()), {vocab, c});
  EXPECT_TRUE(bitwise_equal(grads[0], ref));
  // bf16: accumulated in f32, rounded once per row.
  Tensor wb = zeros({vocab, c}, DType::bf16).set_requires_grad(true);
  embedding(wb, ids).backward(g.to(DType::bf16));
  EXPECT_TRUE(all_close(wb.grad().to(DType::f32), grads[0], 1e-2, 1e-1));
}

TEST(Embedding, MetaShapes) {
  Tensor w = empty({50304, 768}, DType::f32, Device::meta()).set_requires_grad(true);
  Tensor ids = empty({4, 1024}, DType::i64, Device::meta());
  Tensor y = embedding(w, ids);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{4, 1024, 768}));
  y.backward(empty({4, 1024, 768}, DType::f32, Device::meta()));
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_EQ(w.grad().shape(), (Shape{50304, 768}));
}

TEST(Embedding, BadInput) {
  Tensor w = zeros({5, 3});
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string m = message_of([&] { embedding(w, ids_of({0, 4, 1, 2, 7, 5}, {2, 3}, DType::i64)); });
  EXPECT_NE(m.find("[embedding]"), std::string::npos) << m;
  EXPECT_NE(m.find("id 7 at position (1, 1)"), std::string::npos) << m;  // the first bad id
  EXPECT_NE(m.find("[0, 5)"), std::string::npos) << m;
  EXPECT_NE(m.find("V = 5"), std::string::npos) << m;
  EXPECT_THROW(embedding(w, ids_of({-1}, {1}, DType::i32)), Error);
  EXPECT_THROW(embedding(w, from_vector({1.0}, {1})), Error);                // float ids
  EXPECT_THROW(embedding(zeros({5}), ids_of({1}, {1}, DType::i64)), Error);  // 1-D weight
  EXPECT_THROW(embedding(zeros({5, 3}, DType::i64), ids_of({1}, {1}, DType::i64)), Error);
  EXPECT_THROW(embedding(w, empty({1}, DType::i64, Device::meta())), Error);  // devices differ
}

}  // namespace tidal
