// Pattern texts: most patterns are written as their path (the labels from the root joined
// by '.') and store no text; the others keep theirs in one arena, with no allocation per
// subscription.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core.hpp"

namespace topicstore {

inline uint32_t Core::new_text(const char* text, size_t tlen) {
    // room() said it fits and add() compacted: a write that gets here broke that.
    if (arena_.size() + tlen > max_text_bytes_) throw std::length_error("text arena full");
    uint32_t ti = free_text_;
    if (ti != NO_TEXT) {
        free_text_ = texts_[ti].next;
    } else {
        ti = static_cast<uint32_t>(texts_.size());
        texts_.push_back(Text{0, 0, 0, NO_TEXT});
    }
    texts_[ti] = Text{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(tlen), 0,
                      NO_TEXT};
    arena_.append(text, tlen);
    return ti;
}

// Whether `text` is the path text of `tokens` (see Text): then nothing is stored.
inline bool Core::is_path_text(const Token* tokens, size_t ntokens, const char* text, size_t tlen) {
    size_t at = 0;
    for (size_t i = 0; i < ntokens; ++i) {
        if (i != 0) {
            if (at >= tlen || text[at] != '.') return false;
            ++at;
        }
        const Token& t = tokens[i];
        const char* word = t.kind == STAR ? "*" : t.kind == HASH ? "#" : t.data;
        size_t n = t.kind == 0 ? t.size : 1;
        if (tlen - at < n || std::memcmp(text + at, word, n) != 0) return false;
        at += n;
    }
    return at == tlen;
}

// The labels from the root to node `i` joined by '.' (wildcards as '*' and '#').
inline std::string Core::path_text(uint32_t i) const {
    uint32_t i_tail = nodes_[i].is_tail() ? i : NO_NODE;
    std::vector<uint32_t> labels;
    for (; i != 0; i = nodes_[i].parent) labels.push_back(nodes_[i].label);
    std::string out;
    for (size_t k = labels.size(); k-- > 0;) {
        uint32_t label = labels[k];
        if (k + 1 != labels.size()) out.push_back('.');
        if (label == STAR) out.push_back('*');
        else if (label == HASH) out.push_back('#');
        else out.append(words_[label].text);
    }
    if (i_tail != NO_NODE) {
        uint32_t at = nodes_[i_tail].tail_at();
        for (uint32_t k = 1; k <= tails_[at]; ++k) {
            out.push_back('.');
            out.append(words_[tails_[at + k]].text);
        }
    }
    return out;
}

inline const char* Core::text_of(const IdSlot& s, uint32_t* size) const {
    if (s.text == NO_TEXT) {
        text_scratch_ = path_text(s.node);
        *size = static_cast<uint32_t>(text_scratch_.size());
        return text_scratch_.data();
    }
    const Text& t = texts_[s.text];
    *size = t.len;
    return arena_.data() + t.off;
}

// Unlink text `ti` (no ids left) from `leaf`, free its record, and compact the arena
// once removed texts fill half of it (amortized O(1) per removal).
inline void Core::drop_text(Node& leaf, uint32_t ti) {
    uint32_t* link = &leaf.texts;
    while (*link != ti) link = &texts_[*link].next;
    *link = texts_[ti].next;
    garbage_ += texts_[ti].len;
    texts_[ti] = Text{0, 0, 0, free_text_};
    free_text_ = ti;
    if (garbage_ > 4096 && garbage_ * 2 > arena_.size()) compact_arena();
}

// Copy the live texts to a fresh arena: O(texts).
inline void Core::compact_arena() {
    std::string fresh;
    fresh.reserve(arena_.size() - garbage_);
    for (Text& t : texts_)
        if (t.refs != 0) {
            uint32_t off = static_cast<uint32_t>(fresh.size());
            fresh.append(arena_, t.off, t.len);
            t.off = off;
        }
    arena_.swap(fresh);
    garbage_ = 0;
}

}  // namespace topicstore
