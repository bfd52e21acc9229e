//! Which DN keys a one-level, subtree or children search covers.

use ldap3_proto::proto::LdapSearchScope;
use shards::dn::{key_depth, KEY_SEPARATOR};

/// Which DN keys below the base a one-level, subtree or children search
/// covers (the base itself is decided apart): key ranges, disjoint and in
/// key order; one, or more where aliases widen the scope (`ops::alias`).
pub struct Scope {
    /// Inline: a search without aliases allocates no list.
    pub(super) parts: smallvec::SmallVec<[Part; 1]>,
    /// A key the ranges hold but the scope does not: a children search's
    /// base, within the subtree of an alias target above it.
    pub(super) except: Option<Vec<u8>>,
}

/// One key range of a scope.
pub(super) enum Part {
    /// The keys starting with `prefix` (a base's key and the separator);
    /// with `depth`, only those at that depth or in `also` (a one-level
    /// search's children, and its alias targets within the range).
    Below { prefix: Vec<u8>, depth: Option<usize>, also: Vec<Vec<u8>> },
    /// One key (an alias target: of a one-level search, or the root of a
    /// further subtree).
    Key(Vec<u8>),
}

impl Part {
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        match self {
            Part::Below { prefix, depth, also } => {
                key.starts_with(prefix)
                    && (depth.is_none_or(|d| key_depth(key) == d)
                        || also.binary_search_by(|a| a.as_slice().cmp(key)).is_ok())
            }
            Part::Key(k) => key == k.as_slice(),
        }
    }

    /// The first key of the range (and the scan prefix).
    pub(super) fn start(&self) -> &[u8] {
        match self {
            Part::Below { prefix, .. } => prefix,
            Part::Key(k) => k,
        }
    }

    /// Whether every key of the range sorts at or before `after`.
    pub(super) fn before(&self, after: &[u8]) -> bool {
        match self {
            Part::Below { prefix, .. } => after > prefix.as_slice() && !after.starts_with(prefix),
            Part::Key(k) => after >= k.as_slice(),
        }
    }
}

pub(super) fn below_part(base_key: &[u8], scope: &LdapSearchScope) -> Part {
    let mut prefix = base_key.to_vec();
    prefix.push(KEY_SEPARATOR);
    let depth = (*scope == LdapSearchScope::OneLevel).then(|| key_depth(&prefix));
    Part::Below { prefix, depth, also: Vec::new() }
}

impl Scope {
    pub fn below(base_key: &[u8], scope: &LdapSearchScope) -> Scope {
        Scope { parts: smallvec::smallvec![below_part(base_key, scope)], except: None }
    }

    /// The scope widened by the aliases in it (`alias::scopes`): for a
    /// one-level search, the base's children and the `extra` targets; for
    /// a subtree, the `extra` roots each with its subtree (the base's own
    /// entry, a root, is decided apart).
    pub(super) fn widened(base_key: &[u8], scope: &LdapSearchScope, extra: Vec<Vec<u8>>) -> Scope {
        let mut parts: smallvec::SmallVec<[Part; 1]> = smallvec::SmallVec::new();
        if *scope == LdapSearchScope::OneLevel {
            let Part::Below { prefix, depth, .. } = below_part(base_key, scope) else { unreachable!() };
            // `extra` is sorted, and so is `also`.
            let (also, outside): (Vec<_>, Vec<_>) = extra.into_iter().partition(|t| t.starts_with(&prefix));
            parts.push(Part::Below { prefix, depth, also });
            parts.extend(outside.into_iter().map(Part::Key));
        } else {
            for root in extra {
                if root != base_key {
                    parts.push(Part::Key(root.clone()));
                }
                parts.push(below_part(&root, &LdapSearchScope::Subtree));
            }
        }
        parts.sort_by(|a, b| a.start().cmp(b.start()));
        let except = (*scope == LdapSearchScope::Children).then(|| base_key.to_vec());
        Scope { parts, except }
    }

    /// The one range that may hold `key` (they are disjoint and sorted) decides.
    pub fn contains(&self, key: &[u8]) -> bool {
        let at = self.parts.partition_point(|p| p.start() <= key);
        at > 0 && self.parts[at - 1].contains(key) && self.except.as_deref() != Some(key)
    }
}
