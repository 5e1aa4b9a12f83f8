//! Store tests on loopback (127.0.0.1 only), every loop bounded by a deadline.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

const CHILD_ENV: &str = "MEMREUSE_STORE_TEST_CHILD";
const ID_KEY: &str = "nccl_unique_id";
const ID_LEN: usize = 128;

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind(loopback(0)).expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

fn opts(timeout_ms: u64) -> StoreOptions {
    StoreOptions {
        timeout: Duration::from_millis(timeout_ms),
        ..StoreOptions::default()
    }
}

fn id_bytes() -> Vec<u8> {
    (0..ID_LEN).map(|i| (i * 7 + 3) as u8).collect()
}

/// The body of a child process (does nothing when run as an ordinary test).
#[test]
fn child_role() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let env = LaunchEnv::from_env().expect("launch variables");
    let addr = env.master_socket_addr().expect("master address");
    let timeout = Duration::from_secs(20);
    if env.rank == 0 {
        let store = TcpStore::host(addr, opts(20_000)).expect("host the store");
        store.set(ID_KEY, &id_bytes()).expect("publish the id");
        let done: Vec<String> = (1..env.world_size).map(|r| format!("done/{r}")).collect();
        let done: Vec<&str> = done.iter().map(String::as_str).collect();
        store
            .wait(&done, timeout)
            .expect("every rank fetched the id");
    } else {
        let store = TcpStore::connect(addr, opts(20_000)).expect("connect to rank 0");
        let id = store.get_exact(ID_KEY, ID_LEN).expect("fetch the id");
        assert_eq!(id, id_bytes(), "rank {} got a different id", env.rank);
        store
            .set(&format!("done/{}", env.rank), b"ok")
            .expect("report done");
    }
}

fn spawn_rank(rank: usize, world: usize, port: u16) -> Child {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "store::tests::child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::null())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .spawn()
        .expect("spawn a rank process")
}

fn run_job(world: usize, port: u16) {
    // Fetchers first: they must retry until rank 0's server is up.
    let mut children: Vec<(usize, Child)> = (1..world)
        .map(|r| (r, spawn_rank(r, world, port)))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    children.insert(0, (0, spawn_rank(0, world, port)));
    let deadline = Instant::now() + Duration::from_secs(60);
    for (rank, child) in &mut children {
        let status = loop {
            if let Some(s) = child.try_wait().expect("poll child") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match status {
            Some(s) => assert!(s.success(), "rank {rank} failed: {s}"),
            None => panic!("rank {rank} did not finish within 60 s"),
        }
    }
}

#[test]
fn four_processes_share_an_id_and_the_port_is_reusable_after_the_job() {
    let port = free_port();
    run_job(4, port);
    // A second job on the same port right after the first one ended.
    run_job(4, port);
}

#[test]
fn a_second_server_binds_the_port_of_one_that_just_stopped() {
    let first = TcpStore::host(loopback(0), opts(2_000)).expect("host");
    let addr = first.addr();
    first.set("k", b"v").expect("set");
    assert_eq!(first.get("k").expect("get"), b"v");
    drop(first);
    let second = TcpStore::host(addr, opts(2_000)).expect("rebind the same port");
    second.set("k", b"w").expect("set");
    assert_eq!(second.get("k").expect("get"), b"w");
}

#[test]
fn get_and_wait_time_out_with_the_missing_keys() {
    let store = TcpStore::host(loopback(0), opts(200)).expect("host");
    store.set("present", b"1").expect("set");
    let started = Instant::now();
    match store.get("absent") {
        Err(StoreError::Timeout {
            op: "get", keys, ..
        }) => assert_eq!(keys, ["absent"]),
        other => panic!("expected a get timeout, got {other:?}"),
    }
    match store.wait(&["present", "absent"], Duration::from_millis(200)) {
        Err(StoreError::Timeout {
            op: "wait", keys, ..
        }) => assert_eq!(keys, ["absent"]),
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // The connection is still usable after a timeout.
    store
        .wait(&["present"], Duration::from_millis(200))
        .expect("wait");
}

#[test]
fn connect_without_a_server_times_out() {
    let addr = loopback(free_port());
    match TcpStore::connect(addr, opts(300)) {
        Err(StoreError::Connect { millis: 300, .. }) => {}
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let listener = TcpListener::bind(loopback(0)).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let silent = std::thread::spawn(move || {
        let conn = listener.accept().map(|(s, _)| s);
        std::thread::sleep(Duration::from_secs(3));
        drop(conn);
    });
    let store = TcpStore::connect(addr, opts(100)).expect("connect");
    // Grace included, the client still gives up long before the server would answer.
    let started = Instant::now();
    let err = store.set("k", b"v");
    assert!(
        matches!(
            err,
            Err(StoreError::Timeout { .. } | StoreError::Protocol { .. })
        ),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    silent.join().expect("silent server");
}

#[test]
fn a_value_of_the_wrong_length_is_rejected() {
    let store = TcpStore::host(loopback(0), opts(2_000)).expect("host");
    store.set(ID_KEY, &[1u8; 100]).expect("set");
    match store.get_exact(ID_KEY, ID_LEN) {
        Err(StoreError::LengthMismatch {
            expected: 128,
            actual: 100,
            ..
        }) => {}
        other => panic!("expected a length mismatch, got {other:?}"),
    }
}

#[test]
fn oversize_values_and_bad_keys_are_typed_errors() {
    let small = StoreOptions {
        max_value_len: 16,
        ..opts(2_000)
    };
    let store = TcpStore::host(loopback(0), small).expect("host");
    match store.set("big", &[0u8; 17]) {
        Err(StoreError::ValueTooLarge {
            len: 17, max: 16, ..
        }) => {}
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    assert!(matches!(
        store.set("", b"x"),
        Err(StoreError::InvalidKey { .. })
    ));
    let long = "k".repeat(MAX_KEY_LEN + 1);
    assert!(matches!(
        store.get(&long),
        Err(StoreError::InvalidKey { .. })
    ));
    // A client with a larger limit is refused by the server, which stays up.
    let big_client = TcpStore::connect(store.addr(), opts(2_000)).expect("connect");
    match big_client.set("big", &[0u8; 17]) {
        Err(StoreError::ValueTooLarge {
            key,
            len: 17,
            max: 16,
        }) => assert_eq!(key, "big"),
        other => panic!("expected the server's ValueTooLarge, got {other:?}"),
    }
    store.set("ok", b"fine").expect("server still serves");
}

/// Raw frames: a declared length above the limit, and a frame cut short.
#[test]
fn the_server_refuses_bad_frames_without_hanging() {
    let store = TcpStore::host(
        loopback(0),
        StoreOptions {
            max_value_len: 1024,
            ..opts(2_000)
        },
    )
    .expect("host");
    let raw = |frame: &[u8], close_write: bool| -> Vec<u8> {
        let mut s = TcpStream::connect(store.addr()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(frame).expect("write");
        if close_write {
            s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        }
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        reply
    };
    let mut huge = vec![wire::OP_SET];
    wire::put_key(&mut huge, "k");
    huge.extend_from_slice(&(u64::MAX).to_le_bytes());
    assert_eq!(raw(&huge, false).first(), Some(&wire::ST_TOO_LARGE));
    let mut short = vec![wire::OP_SET];
    wire::put_key(&mut short, "k");
    short.extend_from_slice(&100u64.to_le_bytes());
    short.extend_from_slice(&[0u8; 10]);
    assert_eq!(raw(&short, true).first(), Some(&wire::ST_BAD_REQUEST));
    assert!(matches!(
        store.get_timeout("k", Duration::from_millis(100)),
        Err(StoreError::Timeout { .. })
    ));
}

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

const GOOD: [(&str, &str); 5] = [
    ("RANK", "1"),
    ("WORLD_SIZE", "4"),
    ("LOCAL_RANK", "1"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29500"),
];

fn with(var: &str, value: Option<&str>) -> HashMap<String, String> {
    let mut m = vars(&GOOD);
    match value {
        Some(v) => m.insert(var.to_owned(), v.to_owned()),
        None => m.remove(var),
    };
    m
}

#[test]
fn launch_variables_parse_strictly() {
    let env = LaunchEnv::from_map(&vars(&GOOD)).expect("valid");
    assert_eq!(
        (env.rank, env.world_size, env.local_rank, env.master_port),
        (1, 4, 1, 29500)
    );
    assert_eq!(env.master_socket_addr().expect("resolve"), loopback(29500));
    for var in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        assert!(
            matches!(LaunchEnv::from_map(&with(var, None)), Err(EnvError::Missing { var: v, .. }) if v == var),
            "{var} missing"
        );
    }
    let bad = [
        ("RANK", "4"),
        ("RANK", "-1"),
        ("RANK", "+1"),
        ("RANK", " 1"),
        ("RANK", ""),
        ("WORLD_SIZE", "0"),
        ("WORLD_SIZE", "four"),
        ("LOCAL_RANK", "9"),
        ("MASTER_PORT", "0"),
        ("MASTER_PORT", "65536"),
        ("MASTER_PORT", "29500x"),
        ("MASTER_ADDR", ""),
        ("MASTER_ADDR", "host name"),
        // Leading zeros, rejected as `MULTI_STREAM_MEMORY_REUSE=02` is.
        ("RANK", "00"),
        ("RANK", "01"),
        ("WORLD_SIZE", "04"),
        ("LOCAL_RANK", "01"),
        ("MASTER_PORT", "080"),
    ];
    // A 100 KB value is not echoed in full.
    let huge = "9".repeat(100_000);
    let text = LaunchEnv::from_map(&with("RANK", Some(&huge)))
        .expect_err("invalid")
        .to_string();
    assert!(text.len() < 300 && text.contains("100000 bytes"), "{text}");
    for (var, value) in bad {
        match LaunchEnv::from_map(&with(var, Some(value))) {
            Err(e @ EnvError::Invalid { var: v, .. }) => {
                assert_eq!(v, var);
                let text = e.to_string();
                assert!(text.contains(var) && text.contains("expected"), "{text}");
            }
            other => panic!("{var}={value:?}: expected Invalid, got {other:?}"),
        }
    }
}
