//! Communicator lookup: which list of a group contains a rank, and at which group rank.

use std::collections::HashMap;

use super::{Schedule, WORLD};

/// A rank's communicator within one group name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located<'a> {
    /// Index of the list (the communicator is `(group name, index)`).
    pub index: usize,
    /// The rank's position inside the list.
    pub group_rank: usize,
    /// The list's global ranks, in group-rank order.
    pub members: &'a [usize],
}

/// Every group of a schedule, `world` included, indexed for lookups by (name, rank).
#[derive(Debug, Clone)]
pub struct Topology {
    lists: HashMap<String, Vec<Vec<usize>>>,
    // (group, global rank) -> (list index, group rank). Built once so per-op lookups during
    // validation of many iterations stay cheap.
    position: HashMap<(String, usize), (usize, usize)>,
}

impl Topology {
    /// Indexes the schedule's groups. A user group named `world` is ignored here (the
    /// validator reports it); where lists overlap, the first list wins.
    pub fn new(schedule: &Schedule) -> Self {
        let mut lists: HashMap<String, Vec<Vec<usize>>> = schedule
            .groups
            .iter()
            .filter(|(name, _)| name.as_str() != WORLD)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        lists.insert(
            WORLD.to_owned(),
            vec![(0..schedule.world_size.min(super::MAX_WORLD_SIZE)).collect()],
        );
        let mut position = HashMap::new();
        for (name, group_lists) in &lists {
            for (index, list) in group_lists.iter().enumerate() {
                for (group_rank, &rank) in list.iter().enumerate() {
                    position
                        .entry((name.clone(), rank))
                        .or_insert((index, group_rank));
                }
            }
        }
        Self { lists, position }
    }

    /// Whether the group name exists.
    pub fn has_group(&self, group: &str) -> bool {
        self.lists.contains_key(group)
    }

    /// The communicator of `rank` in `group`, if the rank is in one of its lists.
    pub fn locate(&self, group: &str, rank: usize) -> Option<Located<'_>> {
        let &(index, group_rank) = self.position.get(&(group.to_owned(), rank))?;
        let members = self.lists.get(group)?.get(index)?;
        Some(Located {
            index,
            group_rank,
            members,
        })
    }
}
