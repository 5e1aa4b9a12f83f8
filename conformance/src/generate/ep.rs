//! `ep`: expert parallel over `world`. Per layer, tokens are dispatched to the experts with
//! an all-to-all, each expert applies the identity (a copy), and a second all-to-all
//! combines them back: the combined tensor equals the tokens, and both are checked.

use super::ops::{all_to_all, alloc, check, copy, free, upload, wait};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::Schedule;

pub(super) const DESCRIPTION: &str = "EP: all_to_all dispatch and combine around identity experts";

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "ep", 4, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16) * ranks as u64;
    let mut sched = skeleton("ep", DESCRIPTION, ranks, opts);
    let body = &mut sched.body;
    for l in 0..opts.layers {
        let (tok, disp, eo, comb) = (
            format!("tok{l}"),
            format!("disp{l}"),
            format!("eo{l}"),
            format!("comb{l}"),
        );
        let (wd, wc) = (format!("wd{l}"), format!("wc{l}"));
        body.extend([
            alloc(&tok, len),
            upload(&tok, opts.seed.wrapping_add(l as u32)),
            alloc(&disp, len),
            all_to_all(&tok, &disp, "world", Some(&wd)),
            wait(&wd),
            alloc(&eo, len),
            copy(&disp, &eo),
            free(&disp),
            alloc(&comb, len),
            all_to_all(&eo, &comb, "world", Some(&wc)),
            free(&eo),
            wait(&wc),
            check(&comb),
            check(&tok),
            free(&comb),
            free(&tok),
        ]);
    }
    Ok(sched)
}
