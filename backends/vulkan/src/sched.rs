//! Streams of one device as chains of submits on timeline semaphores, and the host-held
//! work ("gates") that keeps every submitted wait satisfiable.
//!
//! A stream is a timeline semaphore and a counter: its `n`-th operation is one
//! `vkQueueSubmit2` that waits for value `n - 1` of the same semaphore (stream order),
//! for every cross-stream wait recorded before it (`stream_wait_event`), and signals `n`.
//! An event is `(stream, value)`.
//!
//! lavapipe has one queue per device, and a submit that waits for a value nobody has
//! submitted a signal for stalls every later submit of that device. So nothing is ever
//! submitted before every value it waits for has been submitted (or host-signalled):
//! - work the host must do first (a collective's data movement, a delay) is a *gate*: a
//!   value of the stream that the host signals (`vkSignalSemaphore`) once the gate is
//!   opened and the stream reached the value before it;
//! - an operation behind a closed gate, or waiting for a value still behind another
//!   stream's gate, is *deferred*: kept here, in order, and submitted by [`Sched::pump`]
//!   once what it waits for is submitted.
//!
//! Command buffers and the memory an operation touches are kept until the stream's counter
//! passes the operation's value, then recycled.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use memreuse_core::BackendError;

use crate::memory::Allocation;
use crate::raw::RawDevice;
use crate::result::{BACKEND, vk_check};

/// `(stream index, value)`: a point on a stream of this device.
pub type Point = (usize, u64);

/// An operation ready to be submitted (or deferred until it may be).
struct Prepared {
    value: u64,
    cmd: Option<vk::CommandBuffer>,
    waits: Vec<Point>,
    keep: Vec<Arc<Allocation>>,
}

/// What a stream holds back on the host, in order.
enum Deferred {
    Submit(Prepared),
    Gate { value: u64, open: bool },
}

/// Submitted, not yet known complete.
struct InFlight {
    value: u64,
    cmd: Option<vk::CommandBuffer>,
    _keep: Vec<Arc<Allocation>>,
}

struct StreamState {
    sem: vk::Semaphore,
    /// Last value given to an operation or gate.
    enqueued: u64,
    /// Last value whose signal was submitted or host-signalled.
    submitted: u64,
    /// Cross-stream waits for the next operation.
    waits: Vec<Point>,
    deferred: VecDeque<Deferred>,
    in_flight: VecDeque<InFlight>,
    /// First host-side part that failed (a collective aborted, timed out or mismatched):
    /// its value and error. Sticky: every wait for that value or a later one reports it.
    fault: Option<(u64, BackendError)>,
}

/// The streams of one device; every method runs under the device's scheduler lock, which
/// is also the queue's submit lock.
pub struct Sched {
    raw: Arc<RawDevice>,
    pool: vk::CommandPool,
    spare: Vec<vk::CommandBuffer>,
    streams: Vec<StreamState>,
    /// Set when a submit failed: the device's streams cannot be trusted any more.
    broken: Option<BackendError>,
}

impl Sched {
    /// The scheduler of `raw`, with no stream yet.
    pub fn new(raw: &Arc<RawDevice>) -> Result<Sched, BackendError> {
        let info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
            .queue_family_index(raw.context.facts.queue_family);
        // SAFETY: valid device and create info.
        let pool = unsafe { raw.device.create_command_pool(&info, None) }
            .map_err(|e| vk_check(e, "vkCreateCommandPool"))?;
        Ok(Sched {
            raw: Arc::clone(raw),
            pool,
            spare: Vec::new(),
            streams: Vec::new(),
            broken: None,
        })
    }

    /// A new stream (its timeline semaphore starts at 0); returns its index and semaphore.
    pub fn create_stream(&mut self) -> Result<(usize, vk::Semaphore), BackendError> {
        let mut timeline = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut timeline);
        // SAFETY: valid device and create info.
        let sem = unsafe { self.raw.device.create_semaphore(&info, None) }
            .map_err(|e| vk_check(e, "vkCreateSemaphore"))?;
        self.streams.push(StreamState {
            sem,
            enqueued: 0,
            submitted: 0,
            waits: Vec::new(),
            deferred: VecDeque::new(),
            in_flight: VecDeque::new(),
            fault: None,
        });
        Ok((self.streams.len() - 1, sem))
    }

    /// The error that broke this device's streams (a failed submit or host signal).
    pub fn broken(&self) -> Option<BackendError> {
        self.broken.clone()
    }

    fn check(&self) -> Result<(), BackendError> {
        self.broken.clone().map_or(Ok(()), Err)
    }

    /// Last value given to an operation of `stream` (0: none yet).
    pub fn enqueued(&self, stream: usize) -> u64 {
        self.streams[stream].enqueued
    }

    /// The next operation of `stream` waits for `point` (of another stream).
    pub fn add_wait(&mut self, stream: usize, point: Point) {
        let (src, value) = point;
        if src == stream || value == 0 {
            return;
        }
        let waits = &mut self.streams[stream].waits;
        match waits.iter_mut().find(|(s, _)| *s == src) {
            Some(w) => w.1 = w.1.max(value),
            None => waits.push(point),
        }
    }

    /// Records one operation on `stream` (`record` adds its commands) and submits it, or
    /// defers it when it may not be submitted yet. Returns its value.
    pub fn enqueue(
        &mut self,
        stream: usize,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
        keep: Vec<Arc<Allocation>>,
    ) -> Result<u64, BackendError> {
        self.check()?;
        self.reclaim();
        let cmd = self.command_buffer()?;
        let d = &self.raw.device;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cmd` is from this device's pool (externally synchronized: we hold the
        // scheduler lock) and not in use (spare or fresh).
        if let Err(e) = unsafe { d.begin_command_buffer(cmd, &begin) } {
            self.spare.push(cmd);
            return Err(vk_check(e, "vkBeginCommandBuffer"));
        }
        record(d, cmd);
        // The host reads results through the mapping once the value is waited: make the
        // transfer writes available to it.
        let to_host = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::TRANSFER)
            .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::HOST)
            .dst_access_mask(vk::AccessFlags2::HOST_READ | vk::AccessFlags2::HOST_WRITE)];
        let dep = vk::DependencyInfo::default().memory_barriers(&to_host);
        // SAFETY: `cmd` is recording; `dep` lives across the call.
        unsafe { d.cmd_pipeline_barrier2(cmd, &dep) };
        // SAFETY: `cmd` is recording.
        if let Err(e) = unsafe { d.end_command_buffer(cmd) } {
            self.spare.push(cmd);
            return Err(vk_check(e, "vkEndCommandBuffer"));
        }
        Ok(self.push(stream, Some(cmd), keep))
    }

    /// Makes the pending cross-stream waits of `stream` part of its order (an empty submit
    /// carrying them), so that a point taken now includes them.
    pub fn flush_waits(&mut self, stream: usize) -> Result<(), BackendError> {
        self.check()?;
        if !self.streams[stream].waits.is_empty() {
            self.push(stream, None, Vec::new());
        }
        self.check()
    }

    /// Every stream's semaphore and current end (pending waits flushed first).
    pub fn ends(&mut self) -> Result<Vec<(vk::Semaphore, u64)>, BackendError> {
        for i in 0..self.streams.len() {
            self.flush_waits(i)?;
        }
        Ok(self.streams.iter().map(|s| (s.sem, s.enqueued)).collect())
    }

    /// Adds a closed gate at the end of `stream`; returns `(value before it, its value)`.
    /// Work enqueued later is held on the host until [`Sched::open_gate`].
    pub fn gate(&mut self, stream: usize) -> Result<(u64, u64), BackendError> {
        self.flush_waits(stream)?;
        let s = &mut self.streams[stream];
        let before = s.enqueued;
        s.enqueued += 1;
        s.deferred.push_back(Deferred::Gate {
            value: s.enqueued,
            open: false,
        });
        Ok((before, s.enqueued))
    }

    /// The error a wait for `value` of `stream` must report, if a gate at or before it
    /// opened without its host part done.
    pub fn fault_upto(&self, stream: usize, value: u64) -> Option<BackendError> {
        self.streams[stream]
            .fault
            .as_ref()
            .filter(|(at, _)| *at <= value)
            .map(|(_, e)| e.clone())
    }

    /// Records that gate `value` of `stream` opens without its host part (see
    /// [`Sched::fault_upto`]); the first fault of a stream is kept.
    pub fn fail_gate(&mut self, stream: usize, value: u64, error: BackendError) {
        let s = &mut self.streams[stream];
        if s.fault.is_none() {
            s.fault = Some((value, error));
        }
    }

    /// Opens gate `value` of `stream`. The caller observed the stream's counter at the
    /// value before the gate, so the host may signal it; held work then goes out.
    pub fn open_gate(&mut self, stream: usize, value: u64) {
        for d in &mut self.streams[stream].deferred {
            if let Deferred::Gate { value: v, open } = d {
                if *v == value {
                    *open = true;
                }
            }
        }
        self.pump();
    }

    fn push(
        &mut self,
        stream: usize,
        cmd: Option<vk::CommandBuffer>,
        keep: Vec<Arc<Allocation>>,
    ) -> u64 {
        let s = &mut self.streams[stream];
        s.enqueued += 1;
        let op = Prepared {
            value: s.enqueued,
            cmd,
            waits: std::mem::take(&mut s.waits),
            keep,
        };
        let value = op.value;
        if s.deferred.is_empty() && self.satisfied(&op.waits) {
            self.submit(stream, op);
        } else {
            self.streams[stream]
                .deferred
                .push_back(Deferred::Submit(op));
        }
        value
    }

    fn satisfied(&self, waits: &[Point]) -> bool {
        waits.iter().all(|&(s, v)| self.streams[s].submitted >= v)
    }

    /// Submits every held operation whose waits are now submitted, on every stream, until
    /// nothing more can go.
    pub fn pump(&mut self) {
        loop {
            let mut progress = false;
            for i in 0..self.streams.len() {
                loop {
                    let ready = match self.streams[i].deferred.front() {
                        Some(Deferred::Gate { open, .. }) => *open,
                        Some(Deferred::Submit(op)) => self.satisfied(&op.waits),
                        None => false,
                    };
                    if !ready {
                        break;
                    }
                    match self.streams[i].deferred.pop_front() {
                        Some(Deferred::Gate { value, .. }) => self.host_signal(i, value),
                        Some(Deferred::Submit(op)) => self.submit(i, op),
                        None => break,
                    }
                    progress = true;
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn host_signal(&mut self, stream: usize, value: u64) {
        let s = &mut self.streams[stream];
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(s.sem)
            .value(value);
        // SAFETY: the gate's opener saw the counter at `value - 1`, and nothing later was
        // submitted (it was held behind the gate), so `value` exceeds the counter and every
        // pending signal.
        match unsafe { self.raw.device.signal_semaphore(&info) } {
            Ok(()) => s.submitted = value,
            Err(e) => self.broken = Some(vk_check(e, "vkSignalSemaphore")),
        }
    }

    fn submit(&mut self, stream: usize, op: Prepared) {
        let s = &self.streams[stream];
        let mut waits: Vec<vk::SemaphoreSubmitInfo> = op
            .waits
            .iter()
            .map(|&(src, v)| {
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(self.streams[src].sem)
                    .value(v)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            })
            .collect();
        if op.value > 1 {
            waits.push(
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(s.sem)
                    .value(op.value - 1)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS),
            );
        }
        let signal = [vk::SemaphoreSubmitInfo::default()
            .semaphore(s.sem)
            .value(op.value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let cmds: Vec<vk::CommandBufferSubmitInfo> = op
            .cmd
            .iter()
            .map(|&c| vk::CommandBufferSubmitInfo::default().command_buffer(c))
            .collect();
        let submit = [vk::SubmitInfo2::default()
            .wait_semaphore_infos(&waits)
            .command_buffer_infos(&cmds)
            .signal_semaphore_infos(&signal)];
        // SAFETY: we hold the scheduler lock (the queue's external synchronization); every
        // waited value has been submitted or host-signalled; the command buffer is
        // executable and kept until the counter passes `op.value`.
        let result = unsafe {
            self.raw
                .device
                .queue_submit2(self.raw.queue, &submit, vk::Fence::null())
        };
        let s = &mut self.streams[stream];
        match result {
            Ok(()) => {
                s.submitted = op.value;
                s.in_flight.push_back(InFlight {
                    value: op.value,
                    cmd: op.cmd,
                    _keep: op.keep,
                });
            }
            Err(e) => {
                self.broken = Some(vk_check(e, "vkQueueSubmit2"));
                self.spare.extend(op.cmd);
            }
        }
    }

    fn command_buffer(&mut self) -> Result<vk::CommandBuffer, BackendError> {
        if let Some(c) = self.spare.pop() {
            return Ok(c);
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: valid pool of this device, externally synchronized by the lock.
        let bufs = unsafe { self.raw.device.allocate_command_buffers(&info) }
            .map_err(|e| vk_check(e, "vkAllocateCommandBuffers"))?;
        Ok(bufs[0])
    }

    /// Recycles what completed operations held.
    fn reclaim(&mut self) {
        for s in &mut self.streams {
            if s.in_flight.is_empty() {
                continue;
            }
            // SAFETY: a semaphore of this device.
            let Ok(done) = (unsafe { self.raw.device.get_semaphore_counter_value(s.sem) }) else {
                continue;
            };
            while s.in_flight.front().is_some_and(|f| f.value <= done) {
                if let Some(f) = s.in_flight.pop_front() {
                    self.spare.extend(f.cmd);
                }
            }
        }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        // SAFETY: after the device is idle nothing uses the semaphores or command buffers;
        // destroying the pool frees its command buffers.
        unsafe {
            let _ = self.raw.device.device_wait_idle();
            for s in &self.streams {
                self.raw.device.destroy_semaphore(s.sem, None);
            }
            self.raw.device.destroy_command_pool(self.pool, None);
        }
    }
}

/// The counter of `sem` (a stream of `raw`).
pub fn counter(raw: &RawDevice, sem: vk::Semaphore) -> Result<u64, BackendError> {
    // SAFETY: a semaphore of this device, alive as long as the device.
    unsafe { raw.device.get_semaphore_counter_value(sem) }
        .map_err(|e| vk_check(e, "vkGetSemaphoreCounterValue"))
}

/// Blocks the host until `sem` reaches `value`, at most `timeout` (held work ahead of the
/// value goes out meanwhile: only the scheduler lock's holder submits it, and this is
/// called without it).
pub fn host_wait(
    raw: &RawDevice,
    sem: vk::Semaphore,
    value: u64,
    timeout: Duration,
    what: &str,
) -> Result<(), BackendError> {
    let sems = [sem];
    let values = [value];
    let info = vk::SemaphoreWaitInfo::default()
        .semaphores(&sems)
        .values(&values);
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: a semaphore of this device; waiting for a value not yet signalled is allowed
    // for timeline semaphores on the host.
    match unsafe { raw.device.wait_semaphores(&info, nanos) } {
        Ok(()) => Ok(()),
        Err(vk::Result::TIMEOUT) => Err(BackendError::Timeout {
            backend: BACKEND.to_owned(),
            what: what.to_owned(),
            millis: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }),
        Err(e) => Err(vk_check(e, "vkWaitSemaphores")),
    }
}
