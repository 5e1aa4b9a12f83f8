//! The facade's `open_backend` and `open_world` accept plugin names: `plugin:PATH` loads
//! the file with cargo feature `plugin`, and names the feature without it.

use memreuse::{BackendOptions, OpenError, WorldOptions, open_backend, open_world};

#[test]
fn a_plugin_name_is_loaded_or_names_the_feature() {
    let name = "plugin:/no/such/libplugin.so";
    let err = open_backend(name, &BackendOptions::default()).expect_err("no such file");
    #[cfg(feature = "plugin")]
    match &err {
        OpenError::Plugin { name: n, reason } => {
            assert_eq!(n, name);
            assert!(
                reason.contains("/no/such/libplugin.so") && reason.contains("no such file"),
                "{reason}"
            );
        }
        other => panic!("expected OpenError::Plugin, got {other:?}"),
    }
    #[cfg(not(feature = "plugin"))]
    assert!(
        matches!(&err, OpenError::NotCompiled { feature, .. } if feature == "plugin"),
        "{err:?}"
    );
    let world = WorldOptions {
        world_size: 2,
        backend: BackendOptions::default(),
        timeout: std::time::Duration::from_secs(1),
    };
    assert!(open_world(name, &world).is_err());
}
