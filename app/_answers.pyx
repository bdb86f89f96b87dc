# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The batch match answer as JSON, written straight from ``Matcher.match_ids``' arrays
(``answers_json.hpp``; ``app.delivery.batch`` calls it). Building a dict and two lists per
topic and then encoding them holds the GIL several times as long as the walks themselves;
this writes the same bytes as ``orjson.dumps`` of those dicts (``tests/app/test_answers.py``
holds the two to byte equality) in one pass. O(matches) per topic, plus O(m log m) to sort a
topic's m names.

Holds the GIL throughout (it reads the routing table's ``by_id`` list and ``far`` dict,
which the applier changes with the GIL held). A name's UTF-8 is read in place; the pointers
live only while one topic is written, and nothing in between runs Python code."""

from libc.stdint cimport uint32_t
from libcpp.string cimport string
from libcpp.vector cimport vector
from cpython.bytes cimport PyBytes_FromStringAndSize

import orjson


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL


cdef extern from "answers_json.hpp" namespace "topicstore_json" nogil:
    cdef cppclass Name:
        const char* data
        size_t size
    void put_string(string& out, const char* s, size_t n)
    void put_uint(string& out, uint32_t v)
    void put_names(string& out, vector[Name]& names)


def encode_answers(
    const uint32_t[::1] counts, const uint32_t[::1] ids, dict errors, list by_id, dict far
):
    """``(json, matches)``: the batch answer's items for ``match_ids``' ``(counts, ids,
    errors)``, comma-separated without the enclosing brackets, and how many ids they hold.
    Topic k's item is ``{"error": {"code", "message"}}`` when ``errors`` has k, else
    ``{"subscriptions": ids, "subscribers": distinct names, sorted, "groups": []}``; an id's
    name is ``by_id[id]`` (when the list reaches it and the entry is set) or ``far[id]``, and
    an id with neither (removed since the match) has none."""
    cdef Py_ssize_t n = counts.shape[0], size = len(by_id), k, j, at = 0, c
    cdef Py_ssize_t length
    cdef uint32_t sub_id
    cdef const char* data
    cdef string out
    cdef vector[Name] names
    cdef Name name
    out.reserve(n * 72 + 16)
    for k in range(n):
        if k:
            out.push_back(b',')
        c = counts[k]
        if c == 0 and errors:
            error = errors.get(k)
            if error is not None:
                encoded = orjson.dumps({"error": {"code": error.code, "message": error.message}})
                out.append(<const char*>encoded, len(encoded))
                continue
        out.append(b'{"subscriptions":[')
        names.clear()
        for j in range(at, at + c):
            sub_id = ids[j]
            if j > at:
                out.push_back(b',')
            put_uint(out, sub_id)
            text = by_id[sub_id] if sub_id < <size_t>size else None
            if not text:
                text = far.get(sub_id)
                if text is None:
                    continue
            data = PyUnicode_AsUTF8AndSize(text, &length)
            name.data, name.size = data, <size_t>length
            names.push_back(name)
        out.append(b'],"subscribers":[')
        put_names(out, names)
        out.append(b'],"groups":[]}')
        at += c
    return PyBytes_FromStringAndSize(out.data(), out.size()), at
