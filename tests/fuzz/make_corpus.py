#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_server (tests/fuzz/corpus/): a few inputs per command, well-formed and
at the edges, in the record format fuzz_server.c describes. Op numbers come from CUMUX_OPS in
common/generated/protocol.h, so the seeds follow the protocol as it changes.
usage: make_corpus.py [OUTDIR]"""
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, '..', '..', 'common', 'generated', 'protocol.h')


def ops():
    text = open(PROTO).read()
    block = text[text.index('#define CUMUX_OPS(X)'):]
    block = block[:block.index('\n\n')]
    names = re.findall(r'X\((\w+),', block)
    return {n: i for i, n in enumerate(names)}


OP = ops()
# Handles after fuzz_server's setup (which checks them): the context, its legacy stream, the device's default
# pool (made by the first allocation), the module, vec_add, a stream; N is the first handle an input makes.
CTX, LEGACY, DEFAULT_POOL, MODULE, VEC_ADD, STREAM = 1, 2, 3, 4, 5, 6
N = 7
NO_REPLY = 0xffff


def addr(target, offset=0):
    """A tagged address: fuzz_server replaces it with the target's base + offset."""
    return (0xcafef00d << 32) | (target << 24) | ((offset + (1 << 23)) & 0xffffff)


BUF4K, BUF1M, HOST = 0, 1, 2
IMAGE_SIZE = addr(3)  # the kernels' image's size (fd(0) sends the image)


def msg(op, body, answered=True):
    return struct.pack('<BBBH', 0, OP[op], 1 if answered else 0, len(body)) + body


def fd(kind, size=0):
    return struct.pack('<BBI', 2, kind, size)


def stage(slot, state):
    return struct.pack('<BBB', 3, slot, state)


def raw(b):
    return struct.pack('<BH', 1, len(b)) + b


def h(handle, flags=0):
    return struct.pack('<II', handle, flags)


def memset(stream, es, dst, pitch, width, height, value=0x5a):
    return struct.pack('<IIQQQQII', stream, es, dst, pitch, width, height, value, 0)


def copy(kind, stream, dst, src, size):
    return struct.pack('<IIQQQ', kind, stream, dst, src, size)


def copy2d(kind, stream, dst, dpitch, src, spitch, width, height):
    return struct.pack('<IIQQQQQQ', kind, stream, dst, dpitch, src, spitch, width, height)


def launch(fn, stream, grid, block, params, nattrs=0, attrs=b'', shared=0, query=0):
    return struct.pack('<II3I3IIIII', fn, stream, *grid, *block, shared, len(params), nattrs, query) + attrs + params


def vec_add_params(a, b, c, n):
    return struct.pack('<QQQii', a, b, c, n, 0)[:28]


def two(a, b=0):
    """The 8-byte bodies of most graph ops: two u32 (a handle and a handle, flags or a mode)."""
    return struct.pack('<II', a, b)


def add_node(graph, payload=b'', deps=(), hostfn=None):
    """A GRAPH_ADD_*_NODE body (with host_fn_id for a host node), its dependencies, its parameters."""
    d = b''.join(struct.pack('<I', x) for x in deps)
    if len(d) % 8:
        d += b'\0' * (8 - len(d) % 8)
    body = struct.pack('<II', graph, len(deps)) + (struct.pack('<Q', hostfn) if hostfn is not None else b'')
    return body + d + payload


def symbol(module, name):
    return struct.pack('<II', module, 0) + name.encode().ljust(1024, b'\0')


HTOD, DTOH, DTOD = 1, 2, 3
seeds = {}
va = launch(VEC_ADD, STREAM, (4, 1, 1), (256, 1, 1), vec_add_params(addr(BUF4K), addr(BUF4K), addr(BUF4K), 1024))
seeds['launch'] = msg('LAUNCH', va, False) + msg('STREAM_SYNC', h(STREAM))
seeds['launch_legacy_sync'] = msg('LAUNCH', va[:4] + struct.pack('<I', LEGACY) + va[8:], False) + msg('CTX_SYNC', h(CTX))
seeds['memset'] = msg('MEMSET', memset(STREAM, 4, addr(BUF4K), 0, 1024, 1), False) + msg('STREAM_SYNC', h(STREAM))
seeds['memset2d'] = msg('MEMSET', memset(LEGACY, 1, addr(BUF1M), 4096, 4000, 256), False) + msg('STREAM_SYNC', h(LEGACY))
seeds['memset_wrap'] = msg('MEMSET', memset(STREAM, 1, addr(BUF4K), 1 << 33, 4, (1 << 31) + 1), False) + \
    msg('STREAM_SYNC', h(STREAM))
seeds['memset_edge'] = msg('MEMSET', memset(STREAM, 2, addr(BUF4K, 4094), 0, 1, 1), False) + \
    msg('MEMSET', memset(STREAM, 2, addr(BUF4K, 4095), 0, 1, 1), False) + msg('STREAM_SYNC', h(STREAM))
seeds['copy'] = msg('COPY', copy(HTOD, STREAM, addr(BUF4K), addr(HOST), 4096)) + \
    msg('COPY', copy(DTOD, STREAM, addr(BUF1M, 4096), addr(BUF4K), 4096), False) + \
    msg('COPY', copy(DTOH, STREAM, addr(HOST, 100), addr(BUF1M), 8192)) + msg('STREAM_SYNC', h(STREAM))
seeds['copy_edge'] = msg('COPY', copy(DTOD, STREAM, addr(BUF4K, 1), addr(BUF1M), 4096)) + \
    msg('COPY', copy(HTOD, STREAM, addr(BUF4K), addr(HOST, 65535), 2))
seeds['copy2d'] = msg('COPY_2D', copy2d(DTOD, STREAM, addr(BUF1M), 1024, addr(BUF4K), 64, 64, 64)) + \
    msg('COPY_2D', copy2d(HTOD, LEGACY, addr(BUF1M), 2048, addr(HOST), 512, 500, 100), False) + \
    msg('COPY_2D', copy2d(DTOH, LEGACY, addr(HOST), 512, addr(BUF1M), 2048, 512, 128)) + msg('STREAM_SYNC', h(LEGACY))
seeds['copy2d_wrap'] = msg('COPY_2D', copy2d(DTOD, STREAM, addr(BUF4K), 1 << 33, addr(BUF4K, 2048), 1 << 33, 4, (1 << 31) + 1))
staged = struct.pack('<IIQQQQ', STREAM, 1, addr(BUF1M), 65536, 0, 0)
seeds['staged_htod'] = stage(1, 1) + msg('COPY_HTOD_STAGED', staged, False) + msg('STREAM_SYNC', h(STREAM))
seeds['staged_htod_2d'] = stage(2, 1) + msg('COPY_HTOD_STAGED', struct.pack('<IIQQQQ', STREAM, 2, addr(BUF1M), 65536, 512, 4096), False) + \
    msg('STREAM_SYNC', h(STREAM))
seeds['staged_dtoh'] = msg('COPY_DTOH_STAGED', struct.pack('<IIQQQQ', STREAM, 0, addr(BUF1M), 1 << 20, 0, 0))
seeds['staged_dtoh_2d'] = msg('COPY_DTOH_STAGED', struct.pack('<IIQQQQ', LEGACY, 0, addr(BUF1M), 100 * 1000, 1000, 4096))
seeds['events'] = msg('EVENT_CREATE', struct.pack('<II', CTX, 0)) + msg('EVENT_CREATE', struct.pack('<II', CTX, 0)) + \
    msg('EVENT_RECORD', struct.pack('<IIII', N, STREAM, 0, 0), False) + msg('LAUNCH', va, False) + \
    msg('EVENT_RECORD', struct.pack('<IIII', N + 1, STREAM, 0, 0), False) + \
    msg('STREAM_WAIT_EVENT', struct.pack('<IIII', LEGACY, N + 1, 0, 0), False) + msg('EVENT_SYNC', h(N + 1)) + \
    msg('EVENT_QUERY', h(N)) + msg('EVENT_ELAPSED', struct.pack('<II', N, N + 1)) + msg('EVENT_DESTROY', h(N), False)
seeds['streams'] = msg('STREAM_CREATE', struct.pack('<IIiI', CTX, 1, -1, 0)) + msg('STREAM_CREATE', struct.pack('<IIiI', CTX, 0, 0, 0)) + \
    msg('MEMSET', memset(N + 1, 4, addr(BUF4K), 0, 1024, 1), False) + msg('MEMSET', memset(LEGACY, 4, addr(BUF4K), 0, 1024, 1), False) + \
    msg('STREAM_QUERY', h(N)) + msg('STREAM_DESTROY', h(N), False) + msg('STREAM_SYNC', h(N + 1))
seeds['ctx'] = msg('CTX_CREATE', struct.pack('<iI', 0, 0)) + msg('CTX_LIMIT', struct.pack('<IIIIQ', CTX, 1, 0, 0, 0)) + \
    msg('CTX_LIMIT', struct.pack('<IIIIQ', CTX, 0, 1, 0, 4096)) + msg('MEM_INFO', h(CTX)) + msg('CTX_DESTROY', h(N)) + \
    msg('CTX_DESTROY', h(CTX, 1))
seeds['mem'] = msg('MEM_ALLOC', struct.pack('<IIQ', CTX, 0, 12345)) + msg('MEM_FREE', struct.pack('<Q', addr(BUF4K))) + \
    msg('MEM_FREE', struct.pack('<Q', addr(BUF1M, 16))) + msg('MEM_ALLOC', struct.pack('<IIQ', CTX, 0, 1 << 62))
seeds['host'] = fd(1, 8192) + msg('HOST_ALLOC', struct.pack('<QIIQ', 8192, 0, 0, 0)) + msg('HOST_FREE', struct.pack('<Q', addr(HOST))) + \
    fd(1, 100) + msg('HOST_ALLOC', struct.pack('<QIIQ', 4096, 0, 0, 0))
seeds['module'] = fd(0) + msg('MODULE_LOAD', struct.pack('<IIQII', CTX, 1, IMAGE_SIZE, 0, 0)) + \
    msg('MODULE_GET_FUNCTION', symbol(N, 'scale_add')) + msg('MODULE_GET_GLOBAL', symbol(MODULE, 'g_table')) + \
    msg('MODULE_FUNCTION_NAMES', h(MODULE)) + msg('MODULE_UNLOAD', h(MODULE)) + msg('LAUNCH', va, False)
seeds['library'] = fd(0) + msg('MODULE_LOAD', struct.pack('<IIQII', CTX, 2, IMAGE_SIZE, 0, 0)) + msg('MODULE_GET_FUNCTION', symbol(N, 'vec_add')) + \
    msg('LIBRARY_GET_MODULE', h(N)) + msg('MODULE_FUNCTION_NAMES', h(N, 2)) + \
    msg('LAUNCH', launch(N + 1, STREAM, (4, 1, 1), (256, 1, 1), vec_add_params(addr(BUF4K), addr(BUF4K), addr(BUF4K), 1024)), False) + \
    msg('CTX_DESTROY', h(CTX, 1)) + msg('STREAM_SYNC', h(STREAM))
seeds['ptx_no_nul'] = fd(1, 4096) + msg('MODULE_LOAD', struct.pack('<IIQII', CTX, 1, 4096, 0, 0))
seeds['func'] = msg('FUNC_GET_ATTRIBUTE', struct.pack('<IiiI', VEC_ADD, 0, 0, 0)) + \
    msg('FUNC_SET_ATTRIBUTE', struct.pack('<IiiI', VEC_ADD, 8, 1024, 0)) + \
    msg('FUNC_OCCUPANCY', struct.pack('<IIiiQII', VEC_ADD, 0, 256, 0, 0, 0, 0)) + \
    msg('FUNC_OCCUPANCY', struct.pack('<IIiiQII', VEC_ADD, 1, 2, 256, 0, 0, 0)) + \
    msg('FUNC_CLUSTER_OCCUPANCY', launch(VEC_ADD, STREAM, (4, 1, 1), (256, 1, 1), b'', query=1)) + msg('ARCH_DATA', h(0))
attr = struct.pack('<II', 4, 0) + struct.pack('<III', 2, 1, 1).ljust(64, b'\0')
seeds['launch_attrs'] = msg('LAUNCH', launch(VEC_ADD, STREAM, (4, 1, 1), (256, 1, 1),
                                             vec_add_params(addr(BUF4K), addr(BUF4K), addr(BUF4K), 1024), 1, attr), False) + \
    msg('STREAM_SYNC', h(STREAM))
seeds['pools'] = msg('POOL_DEFAULT', struct.pack('<iI', 0, 0)) + msg('POOL_CREATE', struct.pack('<iIQ', 0, 0, 0)) + \
    msg('POOL_ATTRIBUTE', struct.pack('<IiIIQ', DEFAULT_POOL, 1, 1, 0, 1 << 20)) + \
    msg('MEM_ALLOC_ASYNC', struct.pack('<IIQ', STREAM, N, 65536)) + msg('MEM_ALLOC_ASYNC', struct.pack('<IIQ', STREAM, 0, 4096)) + \
    msg('POOL_TRIM', struct.pack('<IIQ', N, 0, 0)) + msg('POOL_DESTROY', struct.pack('<II', N, 0)) + \
    msg('POOL_DESTROY', struct.pack('<II', DEFAULT_POOL, 0))
seeds['free_async'] = msg('MEM_FREE_ASYNC', struct.pack('<IIQ', STREAM, 0, addr(BUF1M)), False) + \
    msg('MEM_FREE_ASYNC', struct.pack('<IIQ', STREAM, 0, addr(BUF1M)), False) + msg('STREAM_SYNC', h(STREAM))
seeds['hostfn'] = msg('HOST_FUNC', struct.pack('<IIQ', STREAM, 0, 42), False) + msg('LAUNCH', va, False) + \
    msg('HOST_FUNC', struct.pack('<IIQ', LEGACY, 0, 43), False) + msg('CTX_SYNC', h(CTX))
ms_payload = memset(0, 4, addr(BUF4K), 1024, 256, 4)
cp_payload = copy2d(DTOD, 0, addr(BUF1M), 4096, addr(BUF4K), 1024, 1024, 4)
kn_payload = launch(VEC_ADD, 0, (4, 1, 1), (256, 1, 1), vec_add_params(addr(BUF4K), addr(BUF4K), addr(BUF4K), 1024))
# graph N; its nodes: memset N+1, kernel N+2, copy N+3, host N+4, empty N+5; the instance N+6.
seeds['graph'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_ADD_MEMSET_NODE', add_node(N, ms_payload)) + \
    msg('GRAPH_ADD_KERNEL_NODE', add_node(N, kn_payload, deps=(N + 1,))) + \
    msg('GRAPH_ADD_MEMCPY_NODE', add_node(N, cp_payload, deps=(N + 2,))) + \
    msg('GRAPH_ADD_HOST_NODE', add_node(N, hostfn=9)) + msg('GRAPH_ADD_EMPTY_NODE', add_node(N)) + \
    msg('GRAPH_ADD_DEPS', two(N, 2) + struct.pack('<IIII', N + 3, N + 4, N + 5, N + 5)) + \
    msg('GRAPH_GET_NODES', two(N)) + msg('NODE_GET_DEPS', two(N + 2)) + \
    msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + msg('GRAPH_LAUNCH', two(N + 6, STREAM), False) + \
    msg('GRAPH_SET_KERNEL_NODE', two(N + 2, N + 6) + kn_payload) + msg('GRAPH_UPLOAD', two(N + 6, STREAM), False) + \
    msg('GRAPH_EXEC_UPDATE', two(N + 6, N)) + msg('GRAPH_LAUNCH', two(N + 6, LEGACY), False) + \
    msg('STREAM_SYNC', h(STREAM)) + msg('GRAPH_DESTROY', two(N), False) + msg('CTX_SYNC', h(CTX))
# A graph whose memset node's memory is freed before the instance (N+2) is launched: the node writes memory
# that is no longer the client's, as a kernel with a stale pointer would (docs/security.md): a fault of the
# client's own work, reported at its next synchronization; the server must go on.
seeds['graph_stale'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_ADD_MEMSET_NODE', add_node(N, ms_payload)) + \
    msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + msg('MEM_FREE', struct.pack('<Q', addr(BUF4K))) + \
    msg('CTX_SYNC', h(CTX)) + msg('GRAPH_LAUNCH', two(N + 2, STREAM), False) + msg('STREAM_SYNC', h(STREAM)) + \
    msg('GRAPH_LAUNCH', two(N + 2, LEGACY), False) + msg('CTX_SYNC', h(CTX))
seeds['graph_wrap'] = msg('GRAPH_CREATE', two(0)) + \
    msg('GRAPH_ADD_MEMSET_NODE', add_node(N, memset(0, 4, addr(BUF4K), 1 << 33, 1, (1 << 31) + 1))) + \
    msg('GRAPH_ADD_MEMSET_NODE', add_node(N, memset(0, 4, addr(BUF4K), 0, 1 << 62, 1)))
seeds['capture'] = msg('CAPTURE_BEGIN', two(STREAM, 0)) + msg('LAUNCH', va, False) + \
    msg('MEMSET', memset(STREAM, 4, addr(BUF4K), 0, 1024, 1), False) + msg('CAPTURE_INFO', two(STREAM)) + \
    msg('CAPTURE_END', two(STREAM)) + msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + \
    msg('GRAPH_LAUNCH', two(N + 1, STREAM), False) + msg('STREAM_SYNC', h(STREAM))
# A context destroyed while one of its streams captures a graph allocation: the capture ends with the stream,
# its allocation with it (the client's cleanup found the allocation leaked, 2026-12-05).
seeds['capture_ctx_destroy'] = msg('CAPTURE_BEGIN', two(STREAM, 2)) + \
    msg('MEM_ALLOC_ASYNC', struct.pack('<IIQ', STREAM, DEFAULT_POOL, 4096)) + msg('CTX_DESTROY', h(CTX))
# A graph with a host node (graph N, node N+1, instance N+2) launched on a stream (N+3) destroyed at once:
# the launch runs on after the stream, and the client's end must wait for it before freeing the node's job
# (a use after free in the fuzzer, 2026-12-05).
seeds['graph_destroyed_stream'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_ADD_HOST_NODE', add_node(N, hostfn=9)) + \
    msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + msg('STREAM_CREATE', struct.pack('<IIiI', CTX, 1, 0, 0)) + \
    msg('LAUNCH', va[:4] + struct.pack('<I', N + 3) + va[8:], False) + msg('GRAPH_LAUNCH', two(N + 2, N + 3), False) + \
    msg('STREAM_DESTROY', h(N + 3), False)
# The same launch, then a capture begun on its stream and left running: the client's end must end the
# capture before it waits for the stream (a synchronize of a capturing stream fails at once).
seeds['graph_capture_left'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_ADD_HOST_NODE', add_node(N, hostfn=9)) + \
    msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + msg('LAUNCH', va, False) + \
    msg('GRAPH_LAUNCH', two(N + 2, STREAM), False) + msg('CAPTURE_BEGIN', two(STREAM, 2))
# VMM (handle N: the allocation). The reservation's address is not known here: maps name a buffer (refused).
seeds['vmm'] = msg('VMM_GRANULARITY', struct.pack('<iI', 0, 0)) + msg('VMM_GRANULARITY', struct.pack('<iI', 0, 1)) + \
    msg('VMM_CREATE', struct.pack('<iIQ', 0, 0, 2 << 20)) + msg('VMM_RESERVE', struct.pack('<QQQQ', 4 << 20, 0, 0, 0)) + \
    msg('VMM_MAP', struct.pack('<QQQII', addr(BUF1M), 2 << 20, 0, N, 0)) + \
    msg('VMM_SET_ACCESS', struct.pack('<QQiI', addr(BUF1M), 2 << 20, 0, 3)) + \
    msg('VMM_UNMAP', struct.pack('<QQ', addr(BUF1M), 2 << 20)) + msg('VMM_RELEASE', h(N)) + \
    msg('VMM_ADDRESS_FREE', struct.pack('<QQ', addr(BUF1M), 4 << 20))
# IPC within one fuzzed client: export a buffer, open it (one's own: refused), close, free.
seeds['ipc'] = msg('IPC_GET_MEM_HANDLE', struct.pack('<Q', addr(BUF4K))) + msg('IPC_OPEN_MEM_HANDLE', struct.pack('<Q', 1)) + \
    msg('IPC_CLOSE_MEM_HANDLE', struct.pack('<Q', addr(BUF4K))) + msg('MEM_FREE', struct.pack('<Q', addr(BUF4K))) + \
    msg('EVENT_CREATE', struct.pack('<II', CTX, 0x6)) + msg('IPC_GET_EVENT_HANDLE', h(N)) + \
    msg('IPC_OPEN_EVENT_HANDLE', struct.pack('<IIQ', CTX, 0, 1)) + msg('EVENT_DESTROY', h(N), False)
# Stream memory operations: a write, a wait it satisfies, a barrier, a 64-bit write; a wait nobody satisfies.
def memop(stream, op, address, value=0, flags=0):
    return struct.pack('<IIQQII', stream, op, address, value, flags, 0)


seeds['memops'] = msg('STREAM_MEM_OP', memop(STREAM, 2, addr(BUF4K), 7), False) + \
    msg('STREAM_MEM_OP', memop(STREAM, 1, addr(BUF4K), 7, 1), False) + msg('STREAM_MEM_OP', memop(STREAM, 6, 0), False) + \
    msg('STREAM_MEM_OP', memop(LEGACY, 5, addr(BUF4K, 8), 1 << 40), False) + \
    msg('STREAM_MEM_OP', memop(STREAM, 4, addr(HOST), 1 << 33), False) + msg('STREAM_SYNC', h(STREAM)) + \
    msg('MEM_RANGE_HANDLE', struct.pack('<QQIIQ', addr(BUF1M), 1 << 20, 1, 0, 0))
# Graphs (graph N): event nodes (event N+1; memset node N+2, record N+3, wait N+4), parameters changed in
# the graph and an instance (N+5), nodes off and on, an edge removed, the wait node destroyed, a clone (its
# handle is the one freed) and its node, a capture into the graph.
CLONE = N + 4
seeds['graph_more'] = msg('GRAPH_CREATE', two(0)) + msg('EVENT_CREATE', struct.pack('<II', CTX, 0)) + \
    msg('GRAPH_ADD_MEMSET_NODE', add_node(N, ms_payload)) + \
    msg('GRAPH_ADD_EVENT_NODE', struct.pack('<IIII', N, 1, N + 1, 0) + struct.pack('<II', N + 2, 0)) + \
    msg('GRAPH_ADD_EVENT_NODE', struct.pack('<IIII', N, 0, N + 1, 1)) + \
    msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + \
    msg('GRAPH_SET_MEMSET_NODE', two(N + 2, N + 5) + ms_payload) + msg('GRAPH_SET_MEMCPY_NODE', two(N + 2, 0) + cp_payload) + \
    msg('GRAPH_SET_HOST_NODE', two(N + 2, 0) + struct.pack('<Q', 5)) + \
    msg('NODE_SET_EVENT', struct.pack('<IIII', N + 3, N + 5, N + 1, 0)) + \
    msg('NODE_GET_PARAMS', two(N + 3)) + msg('NODE_ENABLED', struct.pack('<IIII', N + 5, N + 2, 1, 0)) + \
    msg('NODE_ENABLED', struct.pack('<IIII', N + 5, N + 2, 0, 0)) + msg('GRAPH_LAUNCH', two(N + 5, STREAM), False) + \
    msg('GRAPH_REMOVE_DEPS', two(N, 1) + struct.pack('<II', N + 2, N + 3)) + msg('NODE_DESTROY', two(N + 4)) + \
    msg('GRAPH_CLONE', two(N)) + msg('NODE_FIND_IN_CLONE', two(N + 2, CLONE)) + \
    msg('CAPTURE_BEGIN_TO_GRAPH', struct.pack('<IIII', STREAM, N, 0, 1) + struct.pack('<II', N + 2, 0)) + \
    msg('LAUNCH', va, False) + msg('CAPTURE_END', two(STREAM)) + msg('STREAM_SYNC', h(STREAM))
# Graph memory: an allocation node (N+1) and its parameters, a free node of memory that is not the graph's
# (refused), the node's destruction (refused), an instance (N+2) launched; a captured allocation (the default
# pool) and its free, the capture's graph (N+3); both graphs destroyed (kept by the server while the client
# lives).
seeds['graph_mem'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_ADD_MEM_ALLOC_NODE', struct.pack('<IIQ', N, 0, 4096)) + \
    msg('NODE_GET_PARAMS', two(N + 1)) + \
    msg('GRAPH_ADD_MEM_FREE_NODE', struct.pack('<IIQ', N, 1, addr(BUF4K)) + struct.pack('<II', N + 1, 0)) + \
    msg('NODE_DESTROY', two(N + 1)) + msg('GRAPH_INSTANTIATE', struct.pack('<IIQ', N, 0, 0)) + \
    msg('GRAPH_LAUNCH', two(N + 2, STREAM), False) + msg('STREAM_SYNC', h(STREAM)) + \
    msg('POOL_DEFAULT', struct.pack('<iI', 0, 0)) + msg('CAPTURE_BEGIN', two(STREAM, 2)) + \
    msg('MEM_ALLOC_ASYNC', struct.pack('<IIQ', STREAM, DEFAULT_POOL, 4096)) + msg('CAPTURE_END', two(STREAM)) + \
    msg('GRAPH_DESTROY', two(N), False) + msg('GRAPH_DESTROY', two(N + 3), False) + msg('STREAM_SYNC', h(STREAM))
# Conditional nodes: a handle for graph N (its value is not known here: the node naming 1 is refused), a
# node of an unknown kind, flags out of range.
seeds['graph_cond'] = msg('GRAPH_CREATE', two(0)) + msg('GRAPH_COND_HANDLE', struct.pack('<IIII', N, 1, 1, 0)) + \
    msg('GRAPH_COND_HANDLE', struct.pack('<IIII', N, 0, 7, 0)) + \
    msg('GRAPH_ADD_COND_NODE', struct.pack('<IIQII', N, 0, 1, 1, 1)) + \
    msg('GRAPH_ADD_COND_NODE', struct.pack('<IIQII', N, 0, 1, 9, 1)) + msg('GRAPH_DESTROY', two(N), False)
# Taking memory back after a worker change, by a client that did not come back (refused), with a count
# its payload does not hold, and with none.
seeds['resume_memory'] = msg('RESUME_MEMORY', struct.pack('<II', 1, 0) + struct.pack('<QQiI', addr(BUF4K), 4096, 0, 0)) + \
    msg('RESUME_MEMORY', struct.pack('<II', 1000, 0) + struct.pack('<QQiI', addr(BUF1M), 1 << 20, 0, 0)) + \
    msg('RESUME_MEMORY', struct.pack('<II', 0, 0))
seeds['ring_raw'] = raw(struct.pack('<HHI', OP['INIT'], 0, 16) + b'\0' * 8) + raw(struct.pack('<HHI', OP['PAD'], NO_REPLY, 16) + b'\0' * 8)
seeds['bad_handles'] = b''.join(msg(o, h(99)) for o in ('CTX_SYNC', 'STREAM_SYNC', 'EVENT_SYNC', 'MEM_INFO')) + \
    msg('STREAM_DESTROY', h(LEGACY), False) + msg('EVENT_DESTROY', h(STREAM), False)

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, 'corpus')
os.makedirs(out, exist_ok=True)
for name, data in sorted(seeds.items()):
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
print(f'{len(seeds)} seeds in {out}')
