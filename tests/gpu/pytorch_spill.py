#!/usr/bin/env python3
"""PyTorch under vramspill on a real GPU: a job several times its budget runs and stays exact.

Run by ctest (label gpu) as
    LD_PRELOAD=build/lib/libvramspill.so VRAMSPILL_DEVICE_BUDGET=2GiB python3 pytorch_spill.py
It allocates float32 tensors worth three times what torch.cuda.mem_get_info() reports as total
(the budget, under the shim), fills each on the GPU, runs a few in-place updates over all of
them, and checks every value on the GPU against the closed form. Without the shim the same job
would take three times the budget; with it, what does not fit is spilled to host memory, and the
driver's own pointer attributes must say so for some of the tensors (managed or host memory): a
run in which nothing spilled proves nothing. Under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
the tensors live in VMM handles PyTorch maps itself, and a spilled one is a host-located handle:
the driver's properties of the handles under a tensor say so.

Exits 77 (ctest's "skipped") without torch or without a CUDA device, 0 when every value checks
and some tensors live in host memory, 1 otherwise.
"""
import ctypes
import sys

from torch_on_gpu import torch_or_skip

CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_MEMORYTYPE_HOST = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
VMM_STEP = 2 << 20  # the smallest VMM granularity: every handle under a tensor starts at a step


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", MemLocation), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


def in_host_located_handle(driver, address, size):
    """Whether a VMM handle under [address, address + size) is host-located (a spilled handle of
    PyTorch's expandable segments); False for memory that is not VMM memory."""
    for offset in range(0, size, VMM_STEP):
        handle = ctypes.c_uint64(0)
        if driver.cuMemRetainAllocationHandle(ctypes.byref(handle),
                                              ctypes.c_void_p(address + offset)) != 0:
            return False
        prop = AllocationProp()
        result = driver.cuMemGetAllocationPropertiesFromHandle(ctypes.byref(prop), handle)
        driver.cuMemRelease(handle)
        if result != 0:
            raise RuntimeError(f"cuMemGetAllocationPropertiesFromHandle returned {result}")
        if prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE:
            return True
    return False


def lives_on_host(driver, address):
    """Whether the driver says `address` is managed or host memory (a spill), not device memory."""
    managed = ctypes.c_int(0)
    memory_type = ctypes.c_uint(0)
    for attribute, value in ((CU_POINTER_ATTRIBUTE_IS_MANAGED, managed),
                             (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, memory_type)):
        result = driver.cuPointerGetAttribute(ctypes.byref(value), attribute,
                                              ctypes.c_uint64(address))
        if result != 0:
            raise RuntimeError(f"cuPointerGetAttribute({attribute}) returned {result}")
    return managed.value != 0 or memory_type.value == CU_MEMORYTYPE_HOST


def main() -> int:
    torch = torch_or_skip()
    free, total = torch.cuda.mem_get_info()
    chunk = 256 << 20
    count = max(4, (3 * total) // chunk)
    print(f"pytorch_spill: cuMemGetInfo total {total / 2**30:.2f} GiB, free {free / 2**30:.2f} GiB;"
          f" allocating {count} x 256 MiB = {count * chunk / 2**30:.2f} GiB")
    tensors = []
    for i in range(count):
        t = torch.empty(chunk // 4, dtype=torch.float32, device="cuda")
        t.fill_(float(i % 61 + 1))
        tensors.append(t)
    for _ in range(3):
        for t in tensors:
            t.mul_(0.5).add_(1.0)  # x -> x/2 + 1, exact in float32 for these values
    torch.cuda.synchronize()
    bad = 0
    for i, t in enumerate(tensors):
        expected = float(i % 61 + 1)
        for _ in range(3):
            expected = expected * 0.5 + 1.0
        if not bool(torch.all(t == expected)):
            bad += 1
            print(f"pytorch_spill: tensor {i} differs from {expected}")
    print(f"pytorch_spill: {count - bad} of {count} tensors exact")
    driver = ctypes.CDLL("libcuda.so.1")
    spilled = sum(1 for t in tensors
                  if lives_on_host(driver, t.data_ptr())
                  or in_host_located_handle(driver, t.data_ptr(), chunk))
    print(f"pytorch_spill: {spilled} of {count} tensors in managed or host memory")
    if spilled == 0:
        print("pytorch_spill: nothing was spilled: is the shim preloaded?")
    return 0 if bad == 0 and spilled > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
