//! `ascend_probe PROFILE`: loads the Ascend libraries the way the backend does
//! (`MEMREUSE_ASCEND_LIB_DIR` first) and checks that the loader's view matches an install
//! profile, then runs a grouped ring of sends and receives and a barrier on three ranks.
//! CI runs it against each stand-in variant (`backends/ascend-hccl/ci/profiles.sh`); it
//! also works on a real install.
//!
//! | profile | `HcclGroupStart`/`End` | `HcclBarrier` |
//! | --- | --- | --- |
//! | `default` | in `libhccl.so` | present |
//! | `cann80` (CANN 8.0-8.3) | absent: grouped point-to-point runs ungrouped | absent: one-element all_reduce |
//! | `cann85` (CANN 8.5+) | in `libhcomm.so`, which `libhccl.so` links | present |
//!
//! Exit status 0 when everything matches, 1 (with the mismatches on stderr) otherwise.

use std::process::ExitCode;
use std::time::Duration;

use memreuse_ascend::registry::open_world_with;
use memreuse_core::comm::{Communicator, DType};
use memreuse_core::{Backend, BackendOptions, WorldOptions};

/// What a profile exports: where the group symbols come from, whether HcclBarrier exists.
fn expected(profile: &str) -> Option<(Option<&'static str>, bool)> {
    match profile {
        "default" => Some((Some("libhccl.so"), true)),
        "cann80" => Some((None, false)),
        "cann85" => Some((Some("libhcomm.so"), true)),
        _ => None,
    }
}

fn main() -> ExitCode {
    let profile = std::env::args().nth(1).unwrap_or_default();
    let Some((group, barrier)) = expected(&profile) else {
        eprintln!("usage: ascend_probe default|cann80|cann85 (got `{profile}`)");
        return ExitCode::FAILURE;
    };
    let api = match memreuse_ascend::api() {
        Ok(api) => api,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut bad = Vec::new();
    if api.group_source != group {
        bad.push(format!(
            "group symbols from {:?}, expected {group:?}",
            api.group_source
        ));
    }
    if api.HcclBarrier.is_some() != barrier {
        bad.push(format!(
            "HcclBarrier present: {}",
            api.HcclBarrier.is_some()
        ));
    }
    let options = WorldOptions {
        world_size: 3,
        backend: BackendOptions::default(),
        timeout: Duration::from_secs(60),
    };
    match open_world_with(api, &options) {
        Err(e) => bad.push(format!("opening a world: {e}")),
        Ok(world) => {
            let got: Vec<Result<(f32, bool), String>> = std::thread::scope(|scope| {
                let handles: Vec<_> = world
                    .iter()
                    .enumerate()
                    .map(|(rank, (dev, comm))| scope.spawn(move || ring(rank, dev, comm)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
                    .collect()
            });
            for (rank, r) in got.into_iter().enumerate() {
                match r {
                    Ok((v, emulated)) => {
                        let want = ((rank + 2) % 3) as f32;
                        if v.to_bits() != want.to_bits() {
                            bad.push(format!("rank {rank} received {v}, expected {want}"));
                        }
                        if emulated != group.is_none() {
                            bad.push(format!("rank {rank}: groups emulated {emulated}"));
                        }
                    }
                    Err(e) => bad.push(format!("rank {rank}: {e}")),
                }
            }
        }
    }
    if bad.is_empty() {
        println!(
            "ascend_probe {profile}: libraries from {}, group symbols {:?}, HcclBarrier {}, \
             grouped ring and barrier ok",
            api.source,
            api.group_source,
            if barrier { "present" } else { "absent" }
        );
        ExitCode::SUCCESS
    } else {
        eprintln!("ascend_probe {profile}: {}", bad.join("; "));
        ExitCode::FAILURE
    }
}

/// A grouped ring (send to the next rank, receive from the previous), then a barrier;
/// returns the value received and whether groups were emulated.
fn ring(
    rank: usize,
    dev: &memreuse_ascend::AscendDevice,
    comm: &memreuse_ascend::AscendCommunicator,
) -> Result<(f32, bool), String> {
    let size = comm.size();
    let stream = dev.default_stream();
    let text = |x: &dyn std::fmt::Display| x.to_string();
    let send_buf = dev.malloc(4).map_err(|x| text(&x))?;
    let recv_buf = dev.malloc(4).map_err(|x| text(&x))?;
    dev.copy_host_to_device(send_buf, &(rank as f32).to_le_bytes(), &stream)
        .map_err(|x| text(&x))?;
    comm.group_start().map_err(|x| text(&x))?;
    comm.send(send_buf, 1, DType::F32, (rank + 1) % size, &stream)
        .map_err(|x| text(&x))?;
    comm.recv(recv_buf, 1, DType::F32, (rank + size - 1) % size, &stream)
        .map_err(|x| text(&x))?;
    comm.group_end().map_err(|x| text(&x))?;
    comm.barrier(&stream).map_err(|x| text(&x))?;
    let mut out = [0u8; 4];
    dev.copy_device_to_host(&mut out, recv_buf, &stream)
        .map_err(|x| text(&x))?;
    dev.free(send_buf).map_err(|x| text(&x))?;
    dev.free(recv_buf).map_err(|x| text(&x))?;
    Ok((f32::from_le_bytes(out), comm.groups_emulated()))
}
