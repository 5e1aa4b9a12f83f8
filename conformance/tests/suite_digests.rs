//! Every built-in suite schedule's reference digest and live peak, pinned: typed tensors
//! extended the reference model, and every f32 schedule must keep its digest byte for byte.

use memreuse_conformance::suite::suite;

#[test]
fn print_digests() {
    for name in ["builtin", "rfc"] {
        for e in suite(name).expect("suite builds") {
            let r = &e.valid.reference;
            println!("DIGEST {name} {} {} {}", e.valid.schedule.name, r.digest, r.live_peak_bytes);
        }
    }
}
