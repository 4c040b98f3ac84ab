// mcap's byte-exact CPU memory counter (mcap/memtrack.py loads and documents it).
//
// A GPU's peak is read from its allocator (torch.cuda.max_memory_allocated, mCAP 3.5:
// allocated, not reserved). A CPU stage process has no such counter, so this wraps
// PyTorch's CPU allocator: every tensor storage allocated after install() goes through
// Counting::allocate, which adds the requested bytes to `cur` and keeps the high-water
// mark `peak`. Bytes are the bytes the storage asked for, like the CUDA counter's
// allocated bytes (no rounding, no malloc overhead).
//
// Each live allocation carries a category (other / weights / gradients / optimizer).
// When a new peak is reached the per-category current bytes are copied, so the
// breakdown at the moment of the peak is exact and sums to the peak.
//
// Storages allocated before install() (or while suspended) keep the base allocator's
// own deleter, so freeing them never touches these counters.
#include <torch/extension.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

namespace {

constexpr int kCategories = 4;  // 0 other, 1 weights, 2 gradients, 3 optimizer

// Every counted allocation is the base allocator's block with this header in front of
// the data. The data pointer doubles as the DataPtr's context (code such as
// Allocator::raw_allocate asserts that they are equal), and the header gives the size and
// category back when the block is freed. 64 bytes keep the data 64-byte aligned like the
// base allocator's own blocks.
struct Header {
  int64_t n;
  std::atomic<int> cat;
};
constexpr size_t kHeader = 64;
static_assert(sizeof(Header) <= kHeader, "header must fit in front of the data");

inline Header* header_of(void* data) {
  return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader);
}

std::atomic<int64_t> cur{0};
std::atomic<int64_t> peak{0};
std::atomic<int64_t> capacity{0};  // 0: unlimited
std::atomic<int64_t> by_cat[kCategories];
int64_t peak_by_cat[kCategories] = {0, 0, 0, 0};
std::atomic<int> tag{0};          // category given to new allocations
std::atomic<bool> suspended{false};
std::mutex peak_mutex;            // guards peak_by_cat; taken only when a new peak is hit
c10::Allocator* base = nullptr;

void snapshot_locked() {
  for (int i = 0; i < kCategories; ++i) peak_by_cat[i] = by_cat[i].load();
}

void note_peak(int64_t v) {
  if (v <= peak.load()) return;
  std::lock_guard<std::mutex> lock(peak_mutex);
  if (v <= peak.load()) return;
  peak.store(v);
  snapshot_locked();
}

void release(void* data) {
  Header* h = header_of(data);
  by_cat[h->cat.load()].fetch_sub(h->n);
  cur.fetch_sub(h->n);
  h->~Header();
  base->raw_deallocate(h);
}

struct Counting final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    if (suspended.load()) return base->allocate(nbytes);
    const int64_t n = static_cast<int64_t>(nbytes);
    const int64_t v = cur.fetch_add(n) + n;
    const int64_t cap = capacity.load();
    if (cap > 0 && v > cap) {
      cur.fetch_sub(n);
      // c10::OutOfMemoryError surfaces in Python as torch.OutOfMemoryError, the same
      // class a CUDA out-of-memory raises, so callers handle both alike.
      TORCH_CHECK_WITH(OutOfMemoryError, false,
                       "mcap memtrack: out of memory: allocating ", n, " bytes with ",
                       v - n, " bytes held would exceed the capacity of ", cap, " bytes");
    }
    void* block = nullptr;
    try {
      block = base->raw_allocate(nbytes + kHeader);
    } catch (...) {
      cur.fetch_sub(n);
      throw;
    }
    const int c = tag.load();
    new (block) Header{n, {c}};
    by_cat[c].fetch_add(n);
    note_peak(v);
    void* data = static_cast<char*>(block) + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

Counting counting;

}  // namespace

bool install() {
  if (base != nullptr) return false;
  c10::Allocator* current_cpu = c10::GetCPUAllocator();
  // Blocks are taken and returned through the raw interface, which the default CPU
  // allocator has; another one installed first (a profiler's) may not.
  TORCH_CHECK(current_cpu->raw_deleter() != nullptr,
              "mcap memtrack: the current CPU allocator has no raw interface to wrap");
  base = current_cpu;
  // Priority 100 outranks the default CPU allocator's registration.
  c10::SetCPUAllocator(&counting, 100);
  return true;
}

bool installed() { return base != nullptr; }
int64_t current() { return cur.load(); }
int64_t peak_bytes() { return peak.load(); }

void reset_peak() {
  std::lock_guard<std::mutex> lock(peak_mutex);
  peak.store(cur.load());
  snapshot_locked();
}

void set_capacity(int64_t bytes) { capacity.store(bytes < 0 ? 0 : bytes); }
int64_t get_capacity() { return capacity.load(); }
void set_suspended(bool on) { suspended.store(on); }

int set_tag(int category) {
  TORCH_CHECK(category >= 0 && category < kCategories, "memtrack: category ", category,
              " is not in 0..", kCategories - 1);
  return tag.exchange(category);
}

// Move a storage's bytes to another category; false if this tracker did not allocate it.
bool retag(const at::Tensor& t, int category) {
  TORCH_CHECK(category >= 0 && category < kCategories, "memtrack: category ", category,
              " is not in 0..", kCategories - 1);
  if (!t.defined() || !t.has_storage() || t.device().type() != c10::DeviceType::CPU)
    return false;
  const c10::DataPtr& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &release) return false;
  Header* h = header_of(dp.get());
  const int old = h->cat.exchange(category);
  if (old != category) {
    by_cat[old].fetch_sub(h->n);
    by_cat[category].fetch_add(h->n);
  }
  return true;
}

// How many tensors (and views) hold t's storage: mcap.runner.hybrid waits for a finished
// gloo collective's views to go before the main thread goes on. Read here, not through
// torch._C._storage_Use_Count(t.untyped_storage()._cdata), which would give the storage
// a Python object of its own, whose last reference a gloo thread could then drop.
int64_t storage_use_count(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  return static_cast<int64_t>(t.storage().use_count());
}

std::vector<int64_t> current_by_category() {
  std::vector<int64_t> out(kCategories);
  for (int i = 0; i < kCategories; ++i) out[i] = by_cat[i].load();
  return out;
}

std::vector<int64_t> peak_by_category() {
  std::lock_guard<std::mutex> lock(peak_mutex);
  return std::vector<int64_t>(peak_by_cat, peak_by_cat + kCategories);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install);
  m.def("installed", &installed);
  m.def("current", &current);
  m.def("peak_bytes", &peak_bytes);
  m.def("reset_peak", &reset_peak);
  m.def("set_capacity", &set_capacity);
  m.def("get_capacity", &get_capacity);
  m.def("set_suspended", &set_suspended);
  m.def("set_tag", &set_tag);
  m.def("retag", &retag);
  m.def("storage_use_count", &storage_use_count);
  m.def("current_by_category", &current_by_category);
  m.def("peak_by_category", &peak_by_category);
}
