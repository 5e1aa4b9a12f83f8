//! `memreuse::open_world` opens every rank of a world by backend name, with the same
//! errors as `open_backend` for names this build does not link.

use std::time::Duration;

use memreuse::{BackendOptions, OpenError, WorldOptions, open_world};

fn options(world_size: usize) -> WorldOptions {
    WorldOptions {
        world_size,
        backend: BackendOptions::default(),
        timeout: Duration::from_secs(10),
    }
}

#[test]
fn the_mock_world_opens_one_endpoint_per_rank_in_rank_order() {
    let ranks = open_world("mock", &options(3)).expect("mock world");
    assert_eq!(ranks.len(), 3);
    for (i, endpoint) in ranks.iter().enumerate() {
        assert_eq!(endpoint.rank, i);
        assert_eq!(endpoint.communicator.rank(), i);
        assert_eq!(endpoint.communicator.size(), 3);
    }
}

#[test]
fn names_this_build_does_not_link_are_typed_errors() {
    match open_world("no-such-backend", &options(2)) {
        Err(OpenError::Unknown { name, available }) => {
            assert_eq!(name, "no-such-backend");
            assert!(available.contains(&"mock".to_owned()), "{available:?}");
        }
        Err(other) => panic!("expected Unknown, got {other}"),
        Ok(_) => panic!("an unknown backend opened"),
    }
    #[cfg(not(feature = "ascend"))]
    match open_world("ascend", &options(2)) {
        Err(OpenError::NotCompiled { feature, .. }) => assert_eq!(feature, "ascend"),
        Err(other) => panic!("expected NotCompiled, got {other}"),
        Ok(_) => panic!("ascend is not linked into the default build"),
    }
}
