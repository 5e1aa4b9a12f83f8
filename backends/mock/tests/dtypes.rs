//! The mock communicator in every element type, with expected values written out by hand
//! (not computed by the reference arithmetic it uses), so a wrong reference fails here: the
//! rounding of bf16 and f16 at each step, integer wrap-around, avg, every data-moving
//! collective in fp8, and the refusals (fp8 reductions, avg on integers, lengths that
//! disagree) as typed errors, never panics.

use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp, read_f64, write_f64};
use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_mock::{MockCommunicator, MockConfig, MockDevice, open_mock_world};

fn world(n: usize) -> Vec<(MockDevice, MockCommunicator)> {
    open_mock_world(n, MockConfig::with_capacity(1 << 20)).expect("world")
}

fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    let size = dtype.size_bytes() as usize;
    let mut out = vec![0u8; values.len() * size];
    for (chunk, &v) in out.chunks_exact_mut(size).zip(values) {
        write_f64(dtype, v, chunk);
    }
    out
}

fn upload(dev: &MockDevice, bytes: &[u8]) -> DevicePtr {
    let p = dev.malloc(bytes.len().max(1) as u64).expect("malloc");
    dev.copy_host_to_device(p, bytes, &dev.default_stream())
        .expect("upload");
    p
}

fn download(dev: &MockDevice, p: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    dev.copy_device_to_host(&mut out, p, &dev.default_stream())
        .expect("download");
    out
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(dtype.size_bytes() as usize)
        .map(|c| read_f64(dtype, c))
        .collect()
}

/// `all_reduce` of `inputs[r]` (rank r's values) with `op`: every rank's result bytes.
fn all_reduce(dtype: DType, op: ReduceOp, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let w = world(inputs.len());
    let count = inputs[0].len() / dtype.size_bytes() as usize;
    let bufs: Vec<DevicePtr> = w
        .iter()
        .zip(inputs)
        .map(|((d, _), x)| upload(d, x))
        .collect();
    for ((d, c), &b) in w.iter().zip(&bufs) {
        c.all_reduce(b, count, dtype, op, &d.default_stream())
            .expect("enqueue");
    }
    w.iter()
        .zip(&bufs)
        .map(|((d, _), &b)| download(d, b, inputs[0].len()))
        .collect()
}

fn all_reduce_values(dtype: DType, op: ReduceOp, inputs: &[&[f64]]) -> Vec<f64> {
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|v| encode(dtype, v)).collect();
    let out = all_reduce(dtype, op, &bytes);
    for other in &out[1..] {
        assert_eq!(other, &out[0], "every rank holds the same bits");
    }
    decode(dtype, &out[0])
}

#[test]
fn bf16_and_f16_round_to_their_type_after_every_rank() {
    // In rank order 256 + 1 = 257 rounds to 256 in bf16 (8 significand bits), and so on:
    // 256. Summed in f32 and rounded once it would be 259 -> 260.
    let ones: [&[f64]; 4] = [&[256.0], &[1.0], &[1.0], &[1.0]];
    assert_eq!(
        all_reduce_values(DType::BF16, ReduceOp::Sum, &ones),
        [256.0]
    );
    // f16 (11 significand bits): 2048 + 1 rounds to 2048 at each step.
    let ones: [&[f64]; 3] = [&[2048.0, 1.0], &[1.0, 2.0], &[1.0, 3.0]];
    assert_eq!(
        all_reduce_values(DType::F16, ReduceOp::Sum, &ones),
        [2048.0, 6.0]
    );
}

#[test]
fn every_operator_on_floating_types() {
    let inputs: [&[f64]; 4] = [
        &[1.0, -2.0, 0.5],
        &[2.0, 3.0, 0.5],
        &[3.0, -1.0, 0.5],
        &[4.0, 0.0, 0.5],
    ];
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let want: [(ReduceOp, [f64; 3]); 5] = [
            (ReduceOp::Sum, [10.0, 0.0, 2.0]),
            (ReduceOp::Prod, [24.0, 0.0, 0.0625]),
            (ReduceOp::Max, [4.0, 3.0, 0.5]),
            (ReduceOp::Min, [1.0, -2.0, 0.5]),
            (ReduceOp::Avg, [2.5, 0.0, 0.5]),
        ];
        for (op, want) in want {
            assert_eq!(all_reduce_values(dtype, op, &inputs), want, "{dtype} {op}");
        }
    }
}

#[test]
fn f64_adds_in_f64() {
    let out = all_reduce(
        DType::F64,
        ReduceOp::Sum,
        &[0.1f64.to_le_bytes().to_vec(), 0.2f64.to_le_bytes().to_vec()],
    );
    assert_eq!(out[0], (0.1f64 + 0.2f64).to_le_bytes());
}

#[test]
fn integers_wrap_and_compare_in_their_own_type() {
    let i8s = all_reduce(
        DType::I8,
        ReduceOp::Sum,
        &[vec![100, 0x80], vec![100, 0xff]],
    );
    // 100 + 100 wraps to -56; -128 + -1 wraps to 127.
    assert_eq!(i8s[0], [(-56i8).cast_unsigned(), 127]);
    let u8s = all_reduce(DType::U8, ReduceOp::Max, &[vec![200, 1], vec![7, 255]]);
    assert_eq!(u8s[0], [200, 255]);
    let u8s = all_reduce(DType::U8, ReduceOp::Min, &[vec![200, 1], vec![7, 255]]);
    assert_eq!(u8s[0], [7, 1]);
    let u32s = all_reduce(
        DType::U32,
        ReduceOp::Sum,
        &[u32::MAX.to_le_bytes().to_vec(), 2u32.to_le_bytes().to_vec()],
    );
    assert_eq!(u32s[0], 1u32.to_le_bytes());
    let i32s = all_reduce(
        DType::I32,
        ReduceOp::Min,
        &[(-5i32).to_le_bytes().to_vec(), 3i32.to_le_bytes().to_vec()],
    );
    assert_eq!(i32s[0], (-5i32).to_le_bytes());
    let i64s = all_reduce(
        DType::I64,
        ReduceOp::Prod,
        &[
            (1i64 << 40).to_le_bytes().to_vec(),
            (-(1i64 << 20)).to_le_bytes().to_vec(),
        ],
    );
    assert_eq!(i64s[0], (-(1i64 << 60)).to_le_bytes());
    let u64s = all_reduce(
        DType::U64,
        ReduceOp::Sum,
        &[
            u64::MAX.to_le_bytes().to_vec(),
            u64::MAX.to_le_bytes().to_vec(),
        ],
    );
    assert_eq!(u64s[0], (u64::MAX - 1).to_le_bytes());
}

#[test]
fn reduce_scatter_gives_each_rank_its_chunk_in_the_type() {
    let w = world(2);
    // Two bf16 elements per rank out: rank r gets chunk r of the sum.
    let inputs = [
        encode(DType::BF16, &[1.0, 2.0, 3.0, 4.0]),
        encode(DType::BF16, &[10.0, 20.0, 30.0, 40.0]),
    ];
    let outs: Vec<(DevicePtr, DevicePtr)> = w
        .iter()
        .zip(&inputs)
        .map(|((d, c), x)| {
            let i = upload(d, x);
            let o = upload(d, &[0u8; 4]);
            c.reduce_scatter(i, o, 2, DType::BF16, ReduceOp::Sum, &d.default_stream())
                .expect("enqueue");
            (i, o)
        })
        .collect();
    let got: Vec<Vec<f64>> = w
        .iter()
        .zip(&outs)
        .map(|((d, _), &(_, o))| decode(DType::BF16, &download(d, o, 4)))
        .collect();
    assert_eq!(got, [vec![11.0, 22.0], vec![33.0, 44.0]]);
}

#[test]
fn fp8_moves_through_every_data_collective_bit_for_bit() {
    for dtype in [DType::F8E4M3, DType::F8E5M2] {
        let w = world(2);
        // Every byte value, NaN encodings included: moving data never decodes it.
        let mine: Vec<Vec<u8>> = (0..2u8)
            .map(|r| (0..=255u8).map(|b| b.wrapping_add(r)).collect())
            .collect();
        let n = 256;
        let ptrs: Vec<[DevicePtr; 6]> = w
            .iter()
            .zip(&mine)
            .enumerate()
            .map(|(r, ((d, c), x))| {
                let s = d.default_stream();
                let input = upload(d, x);
                let bcast = upload(d, x);
                let gathered = upload(d, &vec![0; 2 * n]);
                let a2a_in = upload(d, &[x.as_slice(), x.as_slice()].concat());
                let a2a_out = upload(d, &vec![0; 2 * n]);
                let into = upload(d, &vec![0; n]);
                c.broadcast(bcast, n, dtype, 1, &s).expect("broadcast");
                c.all_gather(input, gathered, n, dtype, &s)
                    .expect("all_gather");
                c.all_to_all(a2a_in, a2a_out, n, dtype, &s)
                    .expect("all_to_all");
                if r == 0 {
                    c.send(input, n, dtype, 1, &s).expect("send");
                    c.recv(into, n, dtype, 1, &s).expect("recv");
                } else {
                    c.recv(into, n, dtype, 0, &s).expect("recv");
                    c.send(input, n, dtype, 0, &s).expect("send");
                }
                [input, bcast, gathered, a2a_in, a2a_out, into]
            })
            .collect();
        let both = [mine[0].as_slice(), mine[1].as_slice()].concat();
        for (r, ((d, _), p)) in w.iter().zip(&ptrs).enumerate() {
            assert_eq!(download(d, p[1], n), mine[1], "{dtype} broadcast");
            assert_eq!(download(d, p[2], 2 * n), both, "{dtype} all_gather");
            assert_eq!(download(d, p[4], 2 * n), both, "{dtype} all_to_all");
            assert_eq!(download(d, p[5], n), mine[1 - r], "{dtype} send/recv");
        }
    }
}

fn refusal(dtype: DType, op: ReduceOp) -> CommError {
    let w = world(2);
    let (d, c) = &w[0];
    let p = upload(d, &[0u8; 16]);
    c.all_reduce(p, 2, dtype, op, &d.default_stream())
        .expect_err("refused at enqueue")
}

#[test]
fn fp8_reductions_and_avg_on_integers_are_refused_at_enqueue_naming_both() {
    for dtype in [DType::F8E4M3, DType::F8E5M2] {
        for op in ReduceOp::ALL {
            let e = refusal(dtype, op);
            let text = e.to_string();
            assert!(matches!(e, CommError::InvalidArgument { .. }), "{text}");
            assert!(
                text.contains(dtype.name()) && text.contains(op.name()),
                "{text}"
            );
        }
    }
    for dtype in [
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ] {
        let e = refusal(dtype, ReduceOp::Avg);
        let text = e.to_string();
        assert!(matches!(e, CommError::InvalidArgument { .. }), "{text}");
        assert!(
            text.contains(dtype.name()) && text.contains("avg"),
            "{text}"
        );
    }
}

#[test]
fn ranks_that_disagree_on_the_length_of_a_typed_reduction_fail_with_a_typed_error() {
    let w = world(2);
    // Rank 0 reduces 3 bf16 elements, rank 1 only 2: the body refuses, no panic.
    for ((d, c), count) in w.iter().zip([3usize, 2]) {
        let p = upload(d, &encode(DType::BF16, &[1.0, 2.0, 3.0]));
        c.all_reduce(p, count, DType::BF16, ReduceOp::Sum, &d.default_stream())
            .expect("enqueue");
    }
    for (d, _) in &w {
        let err = d
            .synchronize_device()
            .expect_err("the mismatch fails the op");
        assert!(matches!(err, BackendError::InvalidArgument { .. }), "{err}");
    }
}
