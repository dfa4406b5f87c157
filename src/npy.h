// Minimal writers for -save-tensors: NumPy .npy (format 1.0, C order, little-endian
// host assumed) for float32 / int32 arrays, and a flat JSON object for meta.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fmha {

namespace npy_detail {

inline bool write_array(const std::string& path, const char* descr, const void* data,
                        size_t elem_bytes, const std::vector<int64_t>& shape) {
    std::string dims;  // "(2, 3)", and "(5,)" for one dimension
    size_t count = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        dims += (i > 0 ? ", " : "") + std::to_string(shape[i]);
        count *= static_cast<size_t>(shape[i]);
    }
    if (shape.size() == 1) dims += ",";
    std::string header = std::string("{'descr': '") + descr +
                         "', 'fortran_order': False, 'shape': (" + dims + "), }";
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64 bytes.
    const size_t preamble = 10;
    header.append(63 - (preamble + header.size()) % 64, ' ');
    header += '\n';

    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const uint16_t len = static_cast<uint16_t>(header.size());
    const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff),
                                     static_cast<unsigned char>(len >> 8)};
    bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(len_le, 1, 2, f) == 2 &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              (count == 0 || std::fwrite(data, elem_bytes, count, f) == count);
    ok = std::fclose(f) == 0 && ok;
    return ok;
}

inline std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
            continue;
        }
        out += c;
    }
    return out + "\"";
}

}  // namespace npy_detail

inline bool write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    return npy_detail::write_array(path, "<f4", data, sizeof(float), shape);
}

inline bool write_npy(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape) {
    return npy_detail::write_array(path, "<i4", data, sizeof(int32_t), shape);
}

// A flat JSON object, keys in insertion order.
class JsonObject {
public:
    JsonObject& add(const std::string& key, const std::string& value) {
        return raw(key, npy_detail::quoted(value));
    }
    JsonObject& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
    JsonObject& add(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
    JsonObject& add(const std::string& key, int64_t value) { return raw(key, std::to_string(value)); }
    JsonObject& add(const std::string& key, uint64_t value) { return raw(key, std::to_string(value)); }
    JsonObject& add(const std::string& key, int value) { return add(key, int64_t(value)); }
    JsonObject& add(const std::string& key, double value) {
        if (!std::isfinite(value)) return null(key);
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.9g", value);
        return raw(key, buf);
    }
    JsonObject& null(const std::string& key) { return raw(key, "null"); }

    std::string str() const { return "{\n" + body_ + "\n}\n"; }

    bool write(const std::string& path) const {
        std::FILE* f = std::fopen(path.c_str(), "w");
        if (f == nullptr) return false;
        const std::string s = str();
        bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
        return std::fclose(f) == 0 && ok;
    }

private:
    JsonObject& raw(const std::string& key, const std::string& value) {
        if (!body_.empty()) body_ += ",\n";
        body_ += "  " + npy_detail::quoted(key) + ": " + value;
        return *this;
    }
    std::string body_;
};

}  // namespace fmha
