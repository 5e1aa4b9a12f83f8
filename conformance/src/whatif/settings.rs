//! The allocator settings `whatif` compares by default, and how a setting string becomes a
//! replayable configuration (or a reason it cannot be replayed).

use memreuse_core::AllocatorConfig;
use memreuse_core::allocator::ConfigError;
use memreuse_core::testing::MANUAL_VM_GRANULARITY;

/// The `max_split_size_mb` values of the default sweep.
pub const MAX_SPLIT_SWEEP_MB: [u64; 4] = [64, 128, 256, 512];

/// The default settings, in table order: PyTorch's defaults, expandable segments, the
/// `max_split_size_mb` sweep, `roundup_power2_divisions:4`, and garbage collection with a
/// memory fraction of the whole device (`whatif` reports it as not applicable when no
/// capacity is known).
pub fn default_settings() -> Vec<String> {
    let mut out = vec![String::new(), "expandable_segments:True".to_owned()];
    out.extend(
        MAX_SPLIT_SWEEP_MB
            .iter()
            .map(|mb| format!("max_split_size_mb:{mb}")),
    );
    out.push("roundup_power2_divisions:4".to_owned());
    out.push(GC_SETTING.to_owned());
    out
}

/// The garbage-collection setting of the default list.
pub const GC_SETTING: &str = "garbage_collection_threshold:0.8,per_process_memory_fraction:1.0";

/// What a setting string means for a replay.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Replay with this configuration.
    Replay(AllocatorConfig),
    /// The allocator cannot do this yet.
    NotAvailable(String),
    /// The setting has no meaning for this replay.
    NotApplicable(String),
}

/// Parses `conf` (a `MEMREUSE_ALLOC_CONF` string); `capacity_known` says whether the replay
/// has a device size. A malformed string is an error (the caller's usage error).
pub fn plan(conf: &str, capacity_known: bool) -> Result<Plan, ConfigError> {
    // Expandable segments replay like any setting: the replay device (`ManualBackend`) has
    // virtual memory.
    match AllocatorConfig::parse(conf) {
        Ok(config) => {
            if !capacity_known
                && (config.per_process_memory_fraction.is_some()
                    || config.garbage_collection_threshold.is_some())
            {
                return Ok(Plan::NotApplicable(
                    "per_process_memory_fraction and garbage_collection_threshold need a device \
                     capacity: give --device-memory BYTES (the history names none)"
                        .to_owned(),
                ));
            }
            // The allocator rounds a page size up to the device's mapping granularity: the
            // row would carry the setting's label with another page size's figures.
            let page = config.expandable_segments_page_size;
            if config.expandable_segments && page % MANUAL_VM_GRANULARITY != 0 {
                return Ok(Plan::NotAvailable(format!(
                    "expandable_segments_page_size_mb:{} is not a multiple of the device's {} MiB \
                     mapping granularity (the allocator would use {} MiB pages): give a multiple \
                     of {}",
                    page >> 20,
                    MANUAL_VM_GRANULARITY >> 20,
                    page.max(MANUAL_VM_GRANULARITY)
                        .next_multiple_of(MANUAL_VM_GRANULARITY)
                        >> 20,
                    MANUAL_VM_GRANULARITY >> 20,
                )));
            }
            Ok(Plan::Replay(config))
        }
        Err(e) => Err(e),
    }
}
