//! A search's limits: size and time as the client asks, within what the
//! server (or `limits.by_identity`) allows; and what one walk may examine.

use crate::acl::ReadPlan;
use ldap3_proto::proto::LdapSearchRequest;
use ldap3_proto::LdapResultCode;
use std::time::{Duration, Instant};

pub(super) struct Limits {
    pub size: usize,
    pub deadline: Option<Instant>,
    /// Entries an unindexed search may examine, and the result past it.
    pub lookthrough: usize,
    pub lookthrough_code: LdapResultCode,
    /// `limits.max_filter_tests`: the filter's work on one entry.
    pub tests: u64,
}

/// The server's size and time limits, or the requester's override
/// (`limits.by_identity`).
pub(super) fn configured_limits(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>) -> (usize, u64) {
    let (mut size_limit, mut time_limit) = (live.limits.size_limit, live.limits.time_limit_s);
    if let Some(over) = plan.and_then(|p| p.access.limits()) {
        size_limit = over.size.unwrap_or(size_limit);
        time_limit = over.time_s.unwrap_or(time_limit);
    }
    (size_limit, time_limit)
}

/// The most entries a search of `req` may return: what it asks, within
/// what the requester's limits allow (`None` for the root DN: what it
/// asks).
pub fn size_limit(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>, req: &LdapSearchRequest) -> usize {
    effective(req.sizelimit, configured_limits(live, plan).0, plan.is_none())
}

/// When the search must end (`timeLimitExceeded`): the requested time
/// limit, within the configured one but for the root DN.
pub fn deadline(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>, req: &LdapSearchRequest) -> Option<Instant> {
    match effective(req.timelimit, configured_limits(live, plan).1 as usize, plan.is_none()) {
        usize::MAX => None,
        secs => Some(Instant::now() + Duration::from_secs(secs as u64)),
    }
}

/// A size or time limit: the client's request, capped by the server's
/// configured limit for everyone but the root DN (0 means none).
pub(super) fn effective(requested: i32, configured: usize, is_root: bool) -> usize {
    let requested = if requested > 0 { requested as usize } else { usize::MAX };
    if is_root || configured == 0 {
        requested
    } else {
        requested.min(configured)
    }
}
