#pragma once
/// @file
/// tandem: an ordered `uint64 -> uint64` index whose inner B+tree levels live
/// on the GPU (Harmonia layout) and whose leaves live in host memory as
/// buffered partitioned arrays (BPAs). This is the one header applications
/// include; it shows no TBB or CUDA types.
///
/// The leaf store (`tandem/host/leaf_store.hpp`) is usable on its own today;
/// the batch index API is built on top of it.

#include <tandem/core/types.hpp>
#include <tandem/error.hpp>
#include <tandem/version.hpp>
