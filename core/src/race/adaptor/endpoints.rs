//! [`wrap_endpoints`]: a whole opened world behind the race checker, as the conformance
//! runner uses it.

use std::sync::Arc;

use super::{RaceCheckedComm, RaceChecker, RaceWorld};
use crate::comm::ErasedCommunicator;
use crate::dyn_backend::AnyBackend;
use crate::world::RankEndpoint;

/// Wraps every rank of an opened world: each device in a [`RaceChecker`] of one new
/// [`RaceWorld`] and each world communicator in a [`RaceCheckedComm`] of one family.
/// `race_reports()` of a returned endpoint's backend are the adaptor's (each device keeps
/// at most `max_reports`). Returns the endpoints and the world.
pub fn wrap_endpoints(
    endpoints: Vec<RankEndpoint>,
    max_reports: usize,
) -> (Vec<RankEndpoint>, Arc<RaceWorld>) {
    let world = RaceWorld::new(max_reports);
    let family = world.new_family();
    let wrapped = endpoints
        .into_iter()
        .map(|e| {
            let checker = RaceChecker::new(&world, e.backend);
            let comm = RaceCheckedComm::new(e.communicator, checker.clone(), family);
            RankEndpoint {
                rank: e.rank,
                backend: AnyBackend::new(checker),
                communicator: Box::new(ErasedCommunicator::<RaceChecker<AnyBackend>>::new(
                    Box::new(comm),
                )),
            }
        })
        .collect();
    (wrapped, world)
}
