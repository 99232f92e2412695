// The tidal command's global operator new and delete: malloc and free (mimalloc's where the build links it:
// CMakeLists.txt), with std::bad_alloc when malloc returns nothing. mimalloc's own operator new, written in C,
// aborts the process instead, and tidal turns a std::bad_alloc into its out-of-memory exit with a message
// (tests/integration/hostile_inputs_test.cpp). These definitions in the program replace the library's. Without
// mimalloc the C++ library's own stay.
#ifdef TIDAL_MIMALLOC
#include <cstdlib>
#include <new>

namespace {

// `get()` until it gives memory, running the new-handler between tries; std::bad_alloc when there is none.
template <class F>
void* until_allocated(F get) {
  for (;;) {
    if (void* p = get()) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* allocate(std::size_t n) {
  return until_allocated([n] { return std::malloc(n == 0 ? 1 : n); });
}

void* allocate_aligned(std::size_t n, std::align_val_t align) {
  const std::size_t a = static_cast<std::size_t>(align);
  const std::size_t size = ((n == 0 ? 1 : n) + a - 1) / a * a;  // aligned_alloc wants a multiple of the alignment
  return until_allocated([a, size] { return std::aligned_alloc(a, size); });
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

#endif  // TIDAL_MIMALLOC
