// The batch answer's JSON pieces, for app/_answers.pyx: what orjson writes for the same
// values (compact, UTF-8 kept, the same escapes), so both encoders give identical bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace topicstore_json {

struct Name {
    const char* data;
    size_t size;
};

// A JSON string: '"' and '\\' escaped, control characters as \b \t \n \f \r or \u00XX
// (lowercase hex), everything else (DEL, non-ASCII UTF-8) as is: orjson's choices.
inline void put_string(std::string& out, const char* s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    out.push_back('"');
    size_t run = 0;  // start of the bytes not yet copied
    for (size_t i = 0; i < n; ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        out.append(s + run, i - run);
        run = i + 1;
        out.push_back('\\');
        switch (c) {
            case '"': out.push_back('"'); break;
            case '\\': out.push_back('\\'); break;
            case '\b': out.push_back('b'); break;
            case '\t': out.push_back('t'); break;
            case '\n': out.push_back('n'); break;
            case '\f': out.push_back('f'); break;
            case '\r': out.push_back('r'); break;
            default:
                out.append("u00", 3);
                out.push_back(hex[c >> 4]);
                out.push_back(hex[c & 15]);
        }
    }
    out.append(s + run, n - run);
    out.push_back('"');
}

inline void put_uint(std::string& out, uint32_t v) {
    char digits[10];
    int k = 0;
    do {
        digits[k++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v);
    while (k) out.push_back(digits[--k]);
}

// ``names`` sorted by their UTF-8 bytes (the order of their code points: Python's ``sorted``
// for str) without repeats, as a JSON array's items.
inline void put_names(std::string& out, std::vector<Name>& names) {
    auto less = [](const Name& a, const Name& b) {
        int c = std::memcmp(a.data, b.data, std::min(a.size, b.size));
        return c < 0 || (c == 0 && a.size < b.size);
    };
    auto same = [](const Name& a, const Name& b) {
        return a.size == b.size && std::memcmp(a.data, b.data, a.size) == 0;
    };
    if (names.size() > 1) {
        std::sort(names.begin(), names.end(), less);
        names.erase(std::unique(names.begin(), names.end(), same), names.end());
    }
    for (size_t i = 0; i < names.size(); ++i) {
        if (i) out.push_back(',');
        put_string(out, names[i].data, names[i].size);
    }
}

}  // namespace topicstore_json
