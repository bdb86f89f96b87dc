# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The batch match answer as JSON, written straight from ``Matcher.match_ids``' arrays
(``answers_json.hpp``; ``app.delivery.batch`` calls it), then each delivered id counted
in the process's ``MatchCounts`` (``match_counts.hpp``). Building a dict and two lists per
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

from array import array

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


cdef extern from "match_counts.hpp" namespace "topicstore_stats" nogil:
    cdef cppclass Counts "topicstore_stats::MatchCounts":
        void add_all(const uint32_t* ids, size_t n, uint32_t second, size_t dense)
        void restore(uint32_t id, uint32_t count, uint32_t last)
        void drain(vector[uint32_t]& ids, vector[uint32_t]& counts, vector[uint32_t]& lasts)
        size_t pending()
    uint32_t now "topicstore_stats::MatchCounts::now"()


cdef object _array(vector[uint32_t]& values):
    cdef object out = array("I")
    out.frombytes(PyBytes_FromStringAndSize(<const char*>values.data(), values.size() * 4))
    return out


cdef class MatchCounts:
    """Deliveries per subscription id since the last ``drain``, and the second of the last
    one: the statistics a serving process keeps (``app.stats`` flushes them to the store).
    Counting an id costs one read-modify-write of a 4-byte word in an array indexed by id
    (ids below ``dense``: the routing table's name list, ``RoutingTable.subscriber_names``;
    others go to a map), about 4 bytes per id up to the highest counted. Every method holds
    the GIL and none releases it, so a drain never interleaves with a count: no delivery is
    lost or counted twice."""

    cdef Counts counts

    def add(self, ids, Py_ssize_t dense):
        """One delivery of each of ``ids`` (ints below 2**32), now."""
        cdef vector[uint32_t] taken
        for sub_id in ids:
            taken.push_back(sub_id)
        if taken.size():
            self.counts.add_all(taken.data(), taken.size(), now(), <size_t>max(dense, 0))

    def restore(self, ids, counts, lasts):
        """Put back what a ``drain`` took (its flush failed): added to what was counted
        since, the later of the two last times kept."""
        for sub_id, count, last in zip(ids, counts, lasts):
            self.counts.restore(<uint32_t>sub_id, <uint32_t>count, <uint32_t>last)

    def drain(self):
        """``(ids, counts, lasts)``: three ``array('I')`` of the ids counted since the last
        drain, their deliveries and last second; the counts start again from zero. O(ids
        counted); an id may appear twice (add its counts)."""
        cdef vector[uint32_t] ids, counts, lasts
        self.counts.drain(ids, counts, lasts)
        return _array(ids), _array(counts), _array(lasts)

    def __len__(self):
        """Ids counted since the last drain."""
        return self.counts.pending()


def encode_answers(
    const uint32_t[::1] counts,
    const uint32_t[::1] ids,
    dict errors,
    list by_id,
    dict far,
    MatchCounts delivered=None,
):
    """``(json, matches)``: the batch answer's items for ``match_ids``' ``(counts, ids,
    errors)``, comma-separated without the enclosing brackets, and how many ids they hold.
    Topic k's item is ``{"error": {"code", "message"}}`` when ``errors`` has k, else
    ``{"subscriptions": ids, "subscribers": distinct names, sorted, "groups": []}``; an id's
    name is ``by_id[id]`` (when the list reaches it and the entry is set) or ``far[id]``, and
    an id with neither (removed since the match) has none. ``delivered``: each answered id
    is counted there (a delivery), at the second of this call."""
    cdef Py_ssize_t n = counts.shape[0], size = len(by_id), k, j, at = 0, c
    cdef Py_ssize_t length
    cdef uint32_t sub_id
    cdef const char* data
    cdef string out
    cdef vector[Name] names
    cdef Name name
    cdef Counts* tally = NULL
    cdef uint32_t second = 0
    if delivered is not None:
        tally = &delivered.counts
        second = now()
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
    if tally is not NULL:
        # Apart from the writing above, in one tight pass: the counters' cache misses (one
        # per id of a large table) then overlap instead of waiting behind the JSON work.
        if at:
            tally.add_all(&ids[0], <size_t>at, second, <size_t>size)
    return PyBytes_FromStringAndSize(out.data(), out.size()), at
