//! The keys other allocators' configuration strings accept: torch_npu's spellings that mean
//! the same as a memreuse key (accepted), and PyTorch's and torch_npu's keys that memreuse
//! does not implement (refused as known-but-unsupported, so a launch script written for
//! PyTorch gets a message that says "not implemented" rather than "typo").
//!
//! The lists follow PyTorch 2.8+'s `AcceleratorAllocatorConfig` and `CUDAAllocatorConfig`
//! `getKeys()` and torch_npu's `NPUAllocatorConfig::getKeys()`.

/// Where a key that memreuse does not implement comes from, for the error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyOrigin {
    /// PyTorch's device-generic `AcceleratorAllocatorConfig` (every backend).
    PyTorch,
    /// PyTorch's `CUDAAllocatorConfig` (CUDA and ROCm only).
    PyTorchCuda,
    /// torch_npu's `NPUAllocatorConfig`.
    TorchNpu,
}

impl KeyOrigin {
    /// The allocator that reads the key, as named in messages.
    pub const fn describe(self) -> &'static str {
        match self {
            KeyOrigin::PyTorch => "PyTorch's allocator",
            KeyOrigin::PyTorchCuda => "PyTorch's CUDA allocator",
            KeyOrigin::TorchNpu => "torch_npu's allocator",
        }
    }
}

/// Keys PyTorch or torch_npu accept that memreuse does not implement, with their origin.
/// Pinned-host-memory keys are here too: memreuse has no host allocator.
pub const KNOWN_UNSUPPORTED_KEYS: &[(&str, KeyOrigin)] = &[
    ("max_non_split_rounding_mb", KeyOrigin::PyTorch),
    ("pinned_use_background_threads", KeyOrigin::PyTorch),
    ("pinned_max_round_threshold", KeyOrigin::PyTorch),
    ("pinned_max_cached_size", KeyOrigin::PyTorch),
    ("backend", KeyOrigin::PyTorchCuda),
    ("pinned_use_cuda_host_register", KeyOrigin::PyTorchCuda),
    ("pinned_use_hip_host_register", KeyOrigin::PyTorchCuda),
    ("pinned_num_register_threads", KeyOrigin::PyTorchCuda),
    ("pinned_reserve_segment_size_mb", KeyOrigin::PyTorchCuda),
    ("pinned_free_catch_all", KeyOrigin::PyTorchCuda),
    ("graph_capture_record_stream_reuse", KeyOrigin::PyTorchCuda),
    ("throw_on_cudamalloc_oom", KeyOrigin::PyTorchCuda),
    ("pin_memory_expandable_segments", KeyOrigin::TorchNpu),
    ("pinned_mem_register", KeyOrigin::TorchNpu),
    ("base_addr_aligned_kb", KeyOrigin::TorchNpu),
    ("segment_size_mb", KeyOrigin::TorchNpu),
    ("throw_on_npumalloc_oom", KeyOrigin::TorchNpu),
];

/// torch_npu's spelling of `lazy_reclaim` (same values, same meaning).
pub const NPU_LAZY_RECLAIM_KEY: &str = "multi_stream_lazy_reclaim";

/// torch_npu's page-size key: `page_size:1g` is `expandable_segments_page_size_mb:1024`.
pub const NPU_PAGE_SIZE_KEY: &str = "page_size";

/// The one value torch_npu's `page_size` takes, and its size in bytes.
pub const NPU_PAGE_SIZE_1G: (&str, u64) = ("1g", 1 << 30);

/// The memreuse key a spelling stands for: torch_npu's aliases map to memreuse's own key, so
/// a key given under both spellings is a duplicate.
pub fn canonical_key(key: &str) -> &str {
    match key {
        NPU_LAZY_RECLAIM_KEY => "lazy_reclaim",
        NPU_PAGE_SIZE_KEY => "expandable_segments_page_size_mb",
        "release_lock_on_hipmalloc" | "release_lock_on_npumalloc" => "release_lock_on_cudamalloc",
        other => other,
    }
}

/// The origin of `key` when it is one of [`KNOWN_UNSUPPORTED_KEYS`].
pub fn known_unsupported(key: &str) -> Option<KeyOrigin> {
    KNOWN_UNSUPPORTED_KEYS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, origin)| *origin)
}
