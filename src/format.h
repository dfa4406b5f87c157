// printf-style formatting into a std::string, for the console lines and the check reports.
#pragma once

#include <cstdio>
#include <string>

namespace fmha {

// Output past 511 characters is cut off.
template <class... Args>
std::string format(const char* fmt, Args... args) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), fmt, args...);
    return buf;
}

}  // namespace fmha
