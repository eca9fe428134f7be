#pragma once
/// @file
/// tandem: an ordered `uint64 -> uint64` index whose inner B+tree levels live
/// on the GPU (Harmonia layout) and whose leaves live in host memory as
/// buffered partitioned arrays (BPAs). This is the one header applications
/// include; it shows no TBB or CUDA types.
///
///     tandem::index idx;                       // tandem::config for options
///     idx.load(keys, values, n);               // bulk load, any order
///     tandem::batch b;
///     b.put(7, 70).get(7).scan(0, 100, 10);    // runs as if one by one
///     auto result = idx.submit(std::move(b)).get();

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>
#include <tandem/config.hpp>
#include <tandem/core/types.hpp>
#include <tandem/error.hpp>
#include <tandem/index.hpp>
#include <tandem/stats.hpp>
#include <tandem/version.hpp>
