// An RAII device allocation and the copies between it and a host vector.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda_check.h"

namespace fmha {

template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
        o.ptr_ = nullptr;
        o.count_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(count_, o.count_);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return ptr_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
    DeviceBuffer<T> buf(host.size());
    if (!host.empty())
        CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), buf.bytes(), cudaMemcpyHostToDevice));
    return buf;
}

// A synchronous copy of the whole buffer.
template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& buf) {
    std::vector<T> host(buf.size());
    if (!host.empty())
        CUDA_CHECK(cudaMemcpy(host.data(), buf.get(), buf.bytes(), cudaMemcpyDeviceToHost));
    return host;
}

}  // namespace fmha
