//! One rank of a replay: its allocator, process groups, streams, tensors and works, and
//! the ops of the schedule in that rank's program order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use memreuse_core::allocator::{CachingAllocator, Storage};
use memreuse_core::comm::ReduceOp as CommReduce;
use memreuse_core::observe::{DeviceMetrics, GroupMetrics, MetricsReport};
use memreuse_core::process_group::{CommBuffer, P2pOp, PgError, ProcessGroup, Work, WorkSpan};
use memreuse_core::{AnyBackend, Backend, DType, DevicePtr, DynStream, RankEndpoint, StreamId};

use super::capture::{Capture, artifact_stem};
use super::rank_outcome::RankOutcome;
use super::{ModeChoice, ReplayOptions};
use crate::schedule::{BatchMember, OpKind, Phase, ReduceOp, Schedule, Step, Topology, WORLD};

type B = AnyBackend;

fn reduce(op: Option<ReduceOp>) -> CommReduce {
    match op.unwrap_or_default() {
        ReduceOp::Sum => CommReduce::Sum,
        ReduceOp::Prod => CommReduce::Prod,
        ReduceOp::Max => CommReduce::Max,
        ReduceOp::Min => CommReduce::Min,
    }
}

/// The live state of one rank while it replays.
struct RankState<'s> {
    rank: usize,
    schedule: &'s Schedule,
    topology: Topology,
    backend: B,
    allocator: Arc<CachingAllocator<B>>,
    /// Sub-groups by (group name, list index); `world` is separate.
    groups: HashMap<(String, usize), ProcessGroup<B>>,
    world: Option<ProcessGroup<B>>,
    streams: HashMap<String, DynStream>,
    current: DynStream,
    tensors: HashMap<String, Storage<B>>,
    /// Element type of each live tensor (communication ops name it to the backend).
    dtypes: HashMap<String, DType>,
    works: HashMap<String, Work<B>>,
}

/// Runs every op of `rank` on `allocator` (opened by the replay with the run's
/// configuration) and tears everything down.
pub(crate) fn run_rank(
    schedule: &Schedule,
    endpoint: RankEndpoint,
    allocator: &Arc<CachingAllocator<B>>,
    expected: &[crate::reference::CheckResult],
    options: &ReplayOptions,
) -> RankOutcome {
    let rank = endpoint.rank;
    let mut out = RankOutcome {
        rank,
        ..RankOutcome::default()
    };
    let mut capture = Capture::new(options);
    let mut state = match RankState::new(schedule, endpoint, Arc::clone(allocator), options) {
        Ok(s) => s,
        Err(e) => return RankOutcome::failed(rank, e),
    };
    let mut check_index = 0usize;
    let mut iteration_started: Option<(u32, Instant)> = None;
    let result = (|| -> Result<(), String> {
        for step in schedule.rank_steps(rank) {
            if step.phase == Phase::Body && iteration_started.is_none_or(|(i, _)| i != step.iter) {
                if let Some((_, t)) = iteration_started {
                    out.iteration_ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                iteration_started = Some((step.iter, Instant::now()));
            }
            if step.phase == Phase::Teardown {
                if let Some((_, t)) = iteration_started.take() {
                    out.iteration_ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            let label = format!(
                "{} iter {} op {} `{}`",
                step.phase,
                step.iter,
                step.op_index,
                step.op.kind.name()
            );
            state.backend.set_op_label(&format!("rank {rank} {label}"));
            if let Some(values) = state.execute(&step).map_err(|e| format!("{label}: {e}"))? {
                let want = expected.get(check_index);
                // Bit for bit: the bytes of each value in its own type.
                if want.is_none_or(|w| w.bytes != values) {
                    out.mismatches += 1;
                }
                out.checks.push(values);
                check_index += 1;
            }
            let s = state.allocator.stats();
            out.series
                .push((s.allocated_bytes.current, s.reserved_bytes.current));
            if let Some(c) = capture.as_mut() {
                c.after_step(&state.allocator, &s, step.phase);
            }
        }
        if let Some((_, t)) = iteration_started.take() {
            out.iteration_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    })();
    if let Err(e) = result {
        out.error = Some(e);
        // A rank that stops early must not leave its peers waiting out the timeout:
        // aborting its communicators fails their pending and future ops at once.
        state.abort_groups();
    } else if let Some(e) = state.group_failure() {
        // A synchronous collective that failed (a peer aborted, the device failed) is
        // otherwise only visible as wrong data.
        out.error = Some(e);
    }
    if let Some(c) = capture {
        let mode = options.mode.name();
        let conf = options.alloc_conf.as_ref().map(|c| c.text.as_str());
        let stem = artifact_stem(&schedule.name, &options.backend, &mode, conf, rank);
        let (spans, metrics) = state.observations();
        let (files, errors) = c.finish(&stem, rank, allocator, &spans, &metrics);
        out.artifacts = files;
        out.artifact_errors = errors;
    }
    let (pg_stats, teardown_errors) = state.shutdown();
    if out.error.is_none() && !teardown_errors.is_empty() {
        // A run whose teardown failed did not pass, whatever its checks said.
        out.error = Some(format!("teardown: {}", teardown_errors.join("; ")));
    }
    let stats = allocator.stats();
    out.leaked_bytes = stats.allocated_bytes.current;
    out.peak_allocated_bytes = stats.allocated_bytes.peak;
    out.peak_reserved_bytes = stats.reserved_bytes.peak;
    out.reuse_events_created = stats.reuse_events_created;
    out.record_stream_calls = stats.record_stream_calls;
    out.erase_stream_calls = stats.erase_stream_calls;
    out.alloc_retries = stats.num_alloc_retries;
    out.ooms = stats.num_ooms;
    out.device_alloc_calls = stats.num_device_alloc;
    out.device_free_calls = stats.num_device_free;
    out.device_map_calls = stats.num_device_map;
    out.device_unmap_calls = stats.num_device_unmap;
    out.shelf_stashes = pg_stats.0;
    out.shelf_unstashed_by_watchdog = pg_stats.1;
    out
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(pg_err)`
fn pg_err(e: PgError) -> String {
    e.to_string()
}

impl<'s> RankState<'s> {
    fn new(
        schedule: &'s Schedule,
        endpoint: RankEndpoint,
        allocator: Arc<CachingAllocator<B>>,
        options: &ReplayOptions,
    ) -> Result<Self, String> {
        let backend = endpoint.backend.clone();
        let builder = ProcessGroup::builder(Arc::clone(&allocator), endpoint.communicator)
            .timeout(options.timeout)
            .sync_collectives(options.sync_collectives);
        let builder = match options.mode {
            ModeChoice::Mode(m) => builder.mode(m),
            ModeChoice::Unsafe => builder.negative_control(),
        };
        let world = builder.build().map_err(pg_err)?;
        // Every rank creates every sub-group, in the same (sorted) order, as
        // `torch.distributed.new_group` requires; non-members get `None`.
        let mut groups = HashMap::new();
        let sorted: BTreeMap<_, _> = schedule.groups.iter().collect();
        for (name, lists) in sorted {
            for (index, list) in lists.iter().enumerate() {
                if let Some(pg) = world.new_group(list).map_err(pg_err)? {
                    groups.insert((name.clone(), index), pg);
                }
            }
        }
        let compute = backend.default_stream();
        let mut streams = HashMap::new();
        streams.insert(crate::schedule::COMPUTE.to_owned(), compute.clone());
        for name in &schedule.streams {
            streams.insert(
                name.clone(),
                backend.create_stream().map_err(|e| e.to_string())?,
            );
        }
        Ok(RankState {
            rank: endpoint.rank,
            schedule,
            topology: Topology::new(schedule),
            backend,
            allocator,
            groups,
            world: Some(world),
            streams,
            current: compute,
            tensors: HashMap::new(),
            dtypes: HashMap::new(),
            works: HashMap::new(),
        })
    }

    fn tensor(&self, name: &str) -> Result<&Storage<B>, String> {
        self.tensors
            .get(name)
            .ok_or_else(|| format!("tensor `{name}` is not live"))
    }

    /// Live tensor `name` as a buffer of its element type.
    fn buffer(&self, name: &str) -> Result<CommBuffer<'_, B>, String> {
        let dtype = self.elem(name);
        Ok(CommBuffer::new(self.tensor(name)?, dtype))
    }

    /// The element type of tensor `name` (f32 when not live: [`RankState::tensor`] says
    /// why).
    fn elem(&self, name: &str) -> DType {
        self.dtypes.get(name).copied().unwrap_or(DType::F32)
    }

    fn stream(&self, name: &str) -> Result<&DynStream, String> {
        self.streams
            .get(name)
            .ok_or_else(|| format!("stream `{name}` is not defined"))
    }

    fn group(&self, name: Option<&str>) -> Result<&ProcessGroup<B>, String> {
        let name = name.unwrap_or(WORLD);
        if name == WORLD {
            return self
                .world
                .as_ref()
                .ok_or_else(|| "world group is shut down".to_owned());
        }
        let located = self
            .topology
            .locate(name, self.rank)
            .ok_or_else(|| format!("rank {} is not in group `{name}`", self.rank))?;
        self.groups
            .get(&(name.to_owned(), located.index))
            .ok_or_else(|| format!("group `{name}` list {} was not created", located.index))
    }

    fn keep(&mut self, work: Work<B>, is_async: bool, name: Option<&str>) {
        if is_async {
            if let Some(n) = name {
                self.works.insert(n.to_owned(), work);
            }
        }
    }

    /// Executes one op; returns the read-back values of a `check`.
    fn execute(&mut self, step: &Step<'_>) -> Result<Option<Vec<u8>>, String> {
        let cur = self.current.clone();
        let be = |e: memreuse_core::BackendError| e.to_string();
        match &step.op.kind {
            OpKind::Alloc {
                t,
                elems,
                dtype,
                stream,
            } => {
                let s = match stream {
                    Some(n) => self.stream(n)?.clone(),
                    None => cur,
                };
                let dtype = crate::schedule::elem_type(*dtype);
                let storage = self
                    .allocator
                    .allocate(elems * dtype.size_bytes(), &s)
                    .map_err(|e| e.to_string())?;
                self.tensors.insert(t.clone(), storage);
                self.dtypes.insert(t.clone(), dtype);
            }
            OpKind::Upload { t, seed } => {
                let storage = self.tensor(t)?;
                let len = usize::try_from(storage.requested_size()).map_err(|e| e.to_string())?;
                let bytes =
                    crate::reference::upload_bytes(self.elem(t), *seed, self.rank, step.iter, len);
                self.backend
                    .copy_host_to_device(storage.ptr(), &bytes, &cur)
                    .map_err(be)?;
            }
            OpKind::Zero { t } => {
                let storage = self.tensor(t)?;
                self.backend
                    .memset_zero(storage.ptr(), storage.requested_size(), &cur)
                    .map_err(be)?;
            }
            OpKind::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                elems,
            } => {
                let (s, d) = (self.tensor(src)?, self.tensor(dst)?);
                // Both tensors have this type (validated): offsets and lengths scale by it.
                let size = self.elem(src).size_bytes();
                let n = elems.unwrap_or(s.requested_size() / size);
                let sp = DevicePtr(s.ptr().addr() + src_offset.unwrap_or(0) * size);
                let dp = DevicePtr(d.ptr().addr() + dst_offset.unwrap_or(0) * size);
                self.backend
                    .copy_device_to_device(dp, sp, n * size, &cur)
                    .map_err(be)?;
            }
            OpKind::AllReduce {
                t,
                reduce: r,
                group,
                is_async,
                work,
            } => {
                let w = self
                    .group(group.as_deref())?
                    .all_reduce(self.buffer(t)?, reduce(*r), &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::AllGather {
                input,
                out,
                group,
                is_async,
                work,
            } => {
                let w = self
                    .group(group.as_deref())?
                    .all_gather(self.buffer(input)?, self.buffer(out)?, &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::ReduceScatter {
                input,
                out,
                reduce: r,
                group,
                is_async,
                work,
            } => {
                let w = self
                    .group(group.as_deref())?
                    .reduce_scatter(
                        self.buffer(input)?,
                        self.buffer(out)?,
                        reduce(*r),
                        &cur,
                        *is_async,
                    )
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::AllToAll {
                input,
                out,
                group,
                is_async,
                work,
            } => {
                let w = self
                    .group(group.as_deref())?
                    .all_to_all(self.buffer(input)?, self.buffer(out)?, &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::Broadcast {
                t,
                root,
                group,
                is_async,
                work,
            } => {
                let w = self
                    .group(group.as_deref())?
                    .broadcast(self.buffer(t)?, root.unwrap_or(0), &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::Send {
                t,
                peer,
                is_async,
                work,
            } => {
                let w = self
                    .group(None)?
                    .send(self.buffer(t)?, *peer, &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::Recv {
                t,
                peer,
                is_async,
                work,
            } => {
                let w = self
                    .group(None)?
                    .recv(self.buffer(t)?, *peer, &cur, *is_async)
                    .map_err(pg_err)?;
                self.keep(w, *is_async, work.as_deref());
            }
            OpKind::Batch {
                ops,
                is_async,
                work,
            } => {
                let mut members = Vec::with_capacity(ops.len());
                for m in ops {
                    members.push(match m {
                        BatchMember::Send { t, peer } => P2pOp::Send(self.buffer(t)?, *peer),
                        BatchMember::Recv { t, peer } => P2pOp::Recv(self.buffer(t)?, *peer),
                    });
                }
                let w = self
                    .group(None)?
                    .batch_isend_irecv(&members, &cur)
                    .map_err(pg_err)?;
                if *is_async {
                    self.keep(w, true, work.as_deref());
                } else {
                    w.wait(&cur).map_err(pg_err)?;
                }
            }
            OpKind::Barrier { group } => self
                .group(group.as_deref())?
                .barrier(&cur)
                .map_err(pg_err)?,
            OpKind::Wait { work } => {
                let w = self
                    .works
                    .remove(work)
                    .ok_or_else(|| format!("work `{work}` is not pending"))?;
                w.wait(&cur).map_err(pg_err)?;
            }
            OpKind::DropWork { work } => {
                self.works
                    .remove(work)
                    .ok_or_else(|| format!("work `{work}` is not pending"))?;
            }
            OpKind::Free { t } => {
                self.dtypes.remove(t);
                self.tensors
                    .remove(t)
                    .ok_or_else(|| format!("tensor `{t}` is not live"))?;
            }
            OpKind::SetStream { stream } => self.current = self.stream(stream)?.clone(),
            OpKind::WaitStream { stream, on } => {
                let (waiter, producer) = (self.stream(stream)?.clone(), self.stream(on)?.clone());
                let ev = self.backend.create_event().map_err(be)?;
                self.backend.record_event(&ev, &producer).map_err(be)?;
                self.backend.stream_wait_event(&waiter, &ev).map_err(be)?;
            }
            OpKind::RecordStream { t, stream } => {
                let s = self.stream(stream)?.clone();
                self.allocator.record_stream(self.tensor(t)?, &s);
            }
            OpKind::Sync => self.backend.synchronize_device().map_err(be)?,
            OpKind::Check { t } => {
                let storage = self.tensor(t)?;
                let mut bytes = vec![0u8; storage.requested_size() as usize];
                self.backend
                    .copy_device_to_host(&mut bytes, storage.ptr(), &cur)
                    .map_err(be)?;
                return Ok(Some(bytes));
            }
            OpKind::EmptyCache => self.allocator.empty_cache().map_err(|e| e.to_string())?,
            OpKind::Delay { us, stream } => {
                let s = match stream {
                    Some(n) => self.stream(n)?.clone(),
                    None => cur,
                };
                self.backend.delay(*us, &s).map_err(be)?;
            }
        }
        let _ = self.schedule;
        Ok(None)
    }

    /// Every group's finished work spans (with its comm stream) and the metrics of the
    /// allocator and groups, for `--trace-dir`.
    fn observations(&self) -> (Vec<(StreamId, Vec<WorkSpan>)>, MetricsReport) {
        let mut named: Vec<(String, &ProcessGroup<B>)> = Vec::new();
        if let Some(w) = &self.world {
            named.push((WORLD.to_owned(), w));
        }
        let mut subs: Vec<_> = self.groups.iter().collect();
        subs.sort_by(|a, b| a.0.cmp(b.0));
        for ((name, index), pg) in subs {
            named.push((format!("{name}[{index}]"), pg));
        }
        let spans = named
            .iter()
            .map(|(_, pg)| (self.backend.stream_id(pg.comm_stream()), pg.work_spans()))
            .collect();
        let report = MetricsReport {
            devices: vec![DeviceMetrics::collect(self.allocator.as_ref())],
            groups: named
                .iter()
                .map(|(name, pg)| GroupMetrics::collect(pg, name))
                .collect(),
        };
        (spans, report)
    }

    /// Aborts every group, sub-groups first (see [`ProcessGroup::abort`]).
    fn abort_groups(&self) {
        for pg in self.groups.values() {
            pg.abort();
        }
        if let Some(w) = &self.world {
            w.abort();
        }
    }

    /// The first work failure of any group, sub-groups first, with the group's name.
    fn group_failure(&self) -> Option<String> {
        let mut subs: Vec<_> = self.groups.iter().collect();
        subs.sort_by(|a, b| a.0.cmp(b.0));
        subs.into_iter()
            .map(|((name, index), pg)| (format!("group `{name}` list {index}"), pg))
            .chain(self.world.iter().map(|w| ("group `world`".to_owned(), w)))
            .find_map(|(name, pg)| {
                pg.first_failure()
                    .map(|e| format!("{name}: a communication op failed: {e}"))
            })
    }

    /// Drops works and tensors, shuts the groups down (sub-groups first), waits for the
    /// device and lets the allocator process its events. Returns (shelf stashes, shelves
    /// handed over by the watchdog) summed over groups, and what failed on the way.
    fn shutdown(&mut self) -> ((u64, u64), Vec<String>) {
        self.works.clear();
        self.tensors.clear();
        let mut stashes = 0;
        let mut handed = 0;
        for (_, pg) in self.groups.drain() {
            let s = pg.stats();
            stashes += s.shelf_stashes;
            handed += s.shelf_unstashed_by_watchdog;
        }
        if let Some(pg) = self.world.take() {
            let s = pg.stats();
            stashes += s.shelf_stashes;
            handed += s.shelf_unstashed_by_watchdog;
        }
        let mut errors = Vec::new();
        if let Err(e) = self.backend.synchronize_device() {
            errors.push(format!("synchronize_device failed: {e}"));
        }
        if let Err(e) = self.allocator.process_events() {
            errors.push(format!("process_events failed: {e}"));
        }
        ((stashes, handed), errors)
    }
}
