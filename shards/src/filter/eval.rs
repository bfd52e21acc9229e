//! Evaluation: three-valued, on an `EntryView`, bounded per entry
//! (`limits.max_filter_tests`), with the equality items an index answered.

use super::*;

/// Three-valued AND / OR / NOT.
impl Node {
    /// Whether the filter has more than `n` terms (it stops counting there).
    pub fn more_terms_than(&self, n: usize) -> bool {
        fn count(node: &Node, left: &mut usize) -> bool {
            if *left == 0 {
                return true;
            }
            *left -= 1;
            match node {
                Node::AnyOf { values, .. } => {
                    // As many terms as the items it stands for.
                    let more = values.len() - 1 > *left;
                    *left = left.saturating_sub(values.len() - 1);
                    more
                }
                Node::And(fs) | Node::Or(fs) => fs.iter().any(|f| count(f, left)),
                Node::Not(f) | Node::Guarded(_, f) => count(f, left),
                _ => false,
            }
        }
        let mut left = n;
        count(self, &mut left)
    }

    pub fn eval(&self, e: &EntryView<'_>) -> Option<bool> {
        self.eval_with(e, &|_| true)
    }

    /// `eval_with` taking at most `tests` attribute and value tests on this
    /// entry (0: no bound): the work of one entry is terms × attributes ×
    /// values, and no single entry may hold its shard for long. Past the
    /// bound, adminLimitExceeded.
    pub fn eval_bounded<G: Fn(&Names) -> bool>(
        &self,
        e: &EntryView<'_>,
        can_search: &G,
        tests: u64,
    ) -> crate::Result<Option<bool>> {
        let before = TESTS_LEFT.replace(if tests == 0 { u64::MAX } else { tests.saturating_add(1) });
        let verdict = self.eval_with(e, can_search);
        let left = TESTS_LEFT.replace(before);
        if left == 0 {
            return Err(crate::Error::new(
                ldap3_proto::LdapResultCode::AdminLimitExceeded,
                format!(
                    "the filter takes more than {tests} attribute and value tests on one entry \
                     (limits.max_filter_tests)"
                ),
            ));
        }
        Ok(verdict)
    }

    /// Every equality item (`Equal`, `AnyOf`) in the tree, for an index
    /// to decide (`with_decided`), with whether it stands under an odd
    /// number of NOTs (where a false verdict may not stand for Undefined).
    pub fn equality_items<'n>(&'n self, negated: bool, out: &mut Vec<(&'n Node, bool)>) {
        match self {
            Node::And(ns) | Node::Or(ns) => ns.iter().for_each(|n| n.equality_items(negated, out)),
            Node::Not(n) => n.equality_items(!negated, out),
            Node::Guarded(_, n) => n.equality_items(negated, out),
            Node::Equal { .. } | Node::AnyOf { .. } => out.push((self, negated)),
            _ => {}
        }
    }

    /// The `(hasSubordinates=TRUE|FALSE)` items (alone or an OR set), by
    /// address, with whether each matches an entry without children and
    /// one with. hasSubordinates is computed from the child count, which
    /// the caller reads once per entry and answers through
    /// `with_decided`; without that answer the item matches nothing.
    pub fn subordinate_items(&self, out: &mut Vec<(usize, [bool; 2])>) {
        match self {
            Node::And(ns) | Node::Or(ns) => ns.iter().for_each(|n| n.subordinate_items(out)),
            Node::Not(n) | Node::Guarded(_, n) => n.subordinate_items(out),
            Node::Equal { attr, .. } | Node::AnyOf { attr, .. } if attr.name() == "hasSubordinates" => {
                let (_, values) = self.equalities().expect("an equality item");
                let asserts = |v: &[u8]| values.iter().any(|x| x == v);
                out.push((self as *const Node as usize, [asserts(b"FALSE"), asserts(b"TRUE")]))
            }
            _ => {}
        }
    }

    /// The hasSubordinates items answered for `with_decided`, whether the
    /// entry has children asked (a read of its count) only when the filter
    /// names any.
    pub fn subordinates_decided<E>(
        &self,
        has_children: impl FnOnce() -> Result<bool, E>,
    ) -> Result<Vec<(usize, bool)>, E> {
        let mut items = Vec::new();
        self.subordinate_items(&mut items);
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let has = usize::from(has_children()?);
        Ok(items.into_iter().map(|(item, matches)| (item, matches[has])).collect())
    }

    /// The equality values of one equality item or an OR set of them.
    pub fn equalities(&self) -> Option<(&Names, &[Vec<u8>])> {
        match self {
            Node::Equal { attr, value, .. } => Some((attr, std::slice::from_ref(value))),
            Node::AnyOf { attr, values, .. } => Some((attr, values)),
            _ => None,
        }
    }

    /// Evaluates with `can_search` deciding each `Guarded` assertion for
    /// this entry: one the requester may not search is Undefined, so a
    /// filter never discloses what access control hides.
    pub fn eval_with<G: Fn(&Names) -> bool>(&self, e: &EntryView<'_>, can_search: &G) -> Option<bool> {
        match self {
            Node::And(ns) => {
                let mut undefined = false;
                for n in ns {
                    match n.eval_with(e, can_search) {
                        Some(false) => return Some(false),
                        None => undefined = true,
                        Some(true) => {}
                    }
                }
                (!undefined).then_some(true)
            }
            Node::Or(ns) => {
                let mut undefined = false;
                for n in ns {
                    match n.eval_with(e, can_search) {
                        Some(true) => return Some(true),
                        None => undefined = true,
                        Some(false) => {}
                    }
                }
                (!undefined).then_some(false)
            }
            Node::Not(n) => n.eval_with(e, can_search).map(|b| !b),
            Node::Guarded(attr, n) => {
                // An access decision walks the rules: a test of its own.
                if spend() && can_search(attr) {
                    n.eval_with(e, can_search)
                } else {
                    None
                }
            }
            Node::True => Some(true),
            Node::Undefined => None,
            Node::Present(attr) => Some(e.attrs().any(|a| spend() && attr.covers(a.name))),
            Node::Equal { attr, rule, value } => match decided(self) {
                None if !computed(attr) => any_value(e, attr, *rule, |v| v == value.as_slice()),
                verdict => verdict,
            },
            Node::AnyOf { attr, rule, values } => match decided(self) {
                None if !computed(attr) => any_value(e, attr, *rule, |v| in_set(values, v)),
                verdict => verdict,
            },
            Node::Substrings { attr, rule, initial, any, last } => {
                any_value(e, attr, *rule, |v| substrings(v, initial.as_deref(), any, last.as_deref()))
            }
            Node::Order { attr, rule, key, greater } => any_value(e, attr, *rule, |v| {
                let have = rule.order_key(v);
                if *greater {
                    have.as_ref() >= key.as_slice()
                } else {
                    have.as_ref() <= key.as_slice()
                }
            }),
            Node::Extensible { attr, rule, value, dn_attributes, less } => {
                extensible_eval(e, attr, *rule, value, *dn_attributes, *less)
            }
            Node::EntryDn { key, rule, .. } => {
                Some(spend() && dn::key_of(e.dn()).is_ok_and(|k| rule.dn_relates(&k, key)))
            }
            Node::Approx { attr, any } => Some(
                e.attrs()
                    .filter(|a| spend() && attr.covers(a.name))
                    .any(|a| a.vals().any(|v| spend_times(v, any.len()) && approx::matches(any, v))),
            ),
        }
    }

    /// Applies what a requester may search: assertions on attributes they
    /// may never search become Undefined, those that depend on the entry
    /// are `Guarded`. An extensible match over all attributes (no type) is
    /// Undefined unless everything is searchable.
    pub fn restrict(self, searchable: &impl Fn(Option<&Names>) -> Searchable) -> Node {
        self.restrict_with(searchable, false)
    }

    /// `restrict` for the Assertion control, which slapd tests attribute
    /// by attribute: `(objectClass=*)` and its kin, true on every entry,
    /// hold there only for one who may search objectClass. (A search keeps
    /// them true: it shows only entries the requester may read, and the
    /// root DSE and cn=Subschema must answer everyone.)
    pub fn restrict_assertion(self, searchable: &impl Fn(Option<&Names>) -> Searchable) -> Node {
        self.restrict_with(searchable, true)
    }

    fn restrict_with(self, searchable: &impl Fn(Option<&Names>) -> Searchable, true_needs_class: bool) -> Node {
        let wrap = |attr: Option<Names>, node: Node| match searchable(attr.as_ref()) {
            Searchable::Yes => node,
            Searchable::No => Node::Undefined,
            Searchable::Depends => match attr {
                Some(a) => Node::Guarded(a, Box::new(node)),
                None => Node::Undefined,
            },
        };
        match self {
            Node::And(ns) => Node::And(ns.into_iter().map(|n| n.restrict_with(searchable, true_needs_class)).collect()),
            Node::Or(ns) => Node::Or(ns.into_iter().map(|n| n.restrict_with(searchable, true_needs_class)).collect()),
            Node::Not(n) => Node::Not(Box::new(n.restrict_with(searchable, true_needs_class))),
            Node::True if true_needs_class => wrap(Names::new("objectClass"), self),
            Node::True | Node::Undefined | Node::Guarded(..) => self,
            Node::Present(ref a) => wrap(Some(a.clone()), self),
            Node::Equal { ref attr, .. }
            | Node::AnyOf { ref attr, .. }
            | Node::Substrings { ref attr, .. }
            | Node::Order { ref attr, .. }
            | Node::EntryDn { ref attr, .. }
            | Node::Approx { ref attr, .. } => wrap(Some(attr.clone()), self),
            Node::Extensible { ref attr, .. } => wrap(attr.clone(), self),
        }
    }

    /// A Matched Values item (RFC 3876) on one value of the attribute
    /// `name`: `None` when the item does not name that attribute (its
    /// values are then not filtered by it).
    pub fn value_matches(&self, name: &str, v: &[u8]) -> Option<bool> {
        let norm = |rule: &Rule| rule.normalize(v);
        match self {
            Node::True => matching::same_attr(name, "objectClass").then_some(true),
            Node::Present(attr) => attr.covers(name).then_some(true),
            Node::Equal { attr, rule, value } => {
                attr.covers(name).then(|| norm(rule).is_some_and(|n| n.as_ref() == value.as_slice()))
            }
            Node::AnyOf { attr, rule, values } => {
                attr.covers(name).then(|| norm(rule).is_some_and(|n| in_set(values, &n)))
            }
            Node::Substrings { attr, rule, initial, any, last } => attr
                .covers(name)
                .then(|| norm(rule).is_some_and(|n| substrings(&n, initial.as_deref(), any, last.as_deref()))),
            Node::Order { attr, rule, key, greater } => attr.covers(name).then(|| {
                norm(rule).is_some_and(|n| {
                    let have = rule.order_key(&n);
                    if *greater {
                        have.as_ref() >= key.as_slice()
                    } else {
                        have.as_ref() <= key.as_slice()
                    }
                })
            }),
            // slapd keeps a value when the rule compares it equal (its
            // `value_match` returning 0), an ordering rule too: Matched
            // Values keeps `uidNumber:integerOrderingMatch:=5`'s 5, where a
            // filter takes the smaller values.
            Node::Extensible { attr, rule, value, .. } => extensible_covers(attr, *rule, name)
                .then(|| norm(rule).is_some_and(|n| rule_matches(*rule, false, &n, value) == Some(true))),
            Node::Approx { attr, any } => attr.covers(name).then(|| approx::matches(any, v)),
            // A value of the computed entryDN: a DN, related as in a filter.
            Node::EntryDn { attr, key, rule } => attr.covers(name).then(|| {
                std::str::from_utf8(v).ok().and_then(|s| dn::key_of(s).ok()).is_some_and(|k| rule.dn_relates(&k, key))
            }),
            // `(objectClass=person)` compiles to one equality per subclass.
            Node::Or(items) => items.iter().filter_map(|i| i.value_matches(name, v)).reduce(|a, b| a || b),
            _ => None,
        }
    }

    /// Calls `f` with the attribute of every assertion (`None` for an
    /// extensible match over all attributes).
    pub fn for_each_attr(&self, f: &mut impl FnMut(Option<&Names>)) {
        match self {
            Node::And(ns) | Node::Or(ns) => ns.iter().for_each(|n| n.for_each_attr(f)),
            Node::Not(n) => n.for_each_attr(f),
            Node::Guarded(attr, n) => {
                f(Some(attr));
                n.for_each_attr(f)
            }
            Node::True | Node::Undefined => {}
            Node::Present(attr)
            | Node::Equal { attr, .. }
            | Node::AnyOf { attr, .. }
            | Node::Substrings { attr, .. }
            | Node::Order { attr, .. }
            | Node::Approx { attr, .. }
            | Node::EntryDn { attr, .. } => f(Some(attr)),
            Node::Extensible { attr, .. } => f(attr.as_ref()),
        }
    }

    /// Whether the entry matches (Undefined does not).
    pub fn matches(&self, e: &EntryView<'_>) -> bool {
        self.eval(e) == Some(true)
    }
}

thread_local! {
    /// Attribute and value tests the entry being evaluated may still take
    /// (`eval_bounded` sets it; unbounded otherwise). Per thread, so per
    /// shard: no atomic is shared.
    static TESTS_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

thread_local! {
    /// Equality items an index has answered for the entry being evaluated,
    /// by the item's address (`with_decided`); empty otherwise.
    static DECIDED: std::cell::RefCell<Vec<(usize, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` (an evaluation) with `items` (an item's address, its verdict)
/// answering those equality items instead of a pass over the entry's
/// values: a group of a million members is one index lookup per item, not
/// a million tests against `limits.max_filter_tests`.
pub fn with_decided<R>(items: Vec<(usize, bool)>, f: impl FnOnce() -> R) -> R {
    if items.is_empty() {
        return f();
    }
    /// Puts the earlier verdicts back however `f` ends.
    struct Restore(Vec<(usize, bool)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DECIDED.set(std::mem::take(&mut self.0));
        }
    }
    let _restore = Restore(DECIDED.replace(items));
    f()
}

/// An equality item on hasSubordinates that no caller decided (only a
/// search reads child counts, `subordinate_items`) is Undefined: never
/// stored, it must not read as FALSE (and its NOT as TRUE).
fn computed(attr: &Names) -> bool {
    attr.name() == "hasSubordinates"
}

fn decided(item: &Node) -> Option<bool> {
    DECIDED.with_borrow(|d| d.iter().find(|(at, _)| *at == item as *const Node as usize).map(|(_, b)| *b))
}

/// One attribute or value test: false once the entry's budget is spent,
/// and every test after that fails at once, so the evaluation ends fast.
/// The budget starts one above the bound: 0 left means a test was refused
/// (not merely that the last allowed one was taken).
fn spend() -> bool {
    spend_on(&[])
}

/// A test of one value, charged by its length too, one unit per 64 bytes
/// past the first: normalizing and comparing a 1 MB value is as much work
/// as 16,000 tests of short ones, and the bound is on work.
fn spend_on(v: &[u8]) -> bool {
    spend_times(v, 1)
}

/// `spend_on` for `times` tests of one value at once (the assertions of a
/// gathered `~=` node: cheaper now, but each still bounded as one test).
fn spend_times(v: &[u8], times: usize) -> bool {
    let cost = (1 + v.len() as u64 / 64).saturating_mul(times as u64);
    TESTS_LEFT.with(|left| match left.get() {
        n if n > cost => {
            left.set(n - cost);
            true
        }
        _ => {
            left.set(0);
            false
        }
    })
}

/// `limits.max_filter_tests` for the Assertion control's check inside a
/// write (`check_assertion`), where no requester's limits are at hand:
/// set at start and on reload, read with one relaxed load per check.
pub(crate) static ASSERTION_TESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn set_assertion_tests(tests: u64) {
    ASSERTION_TESTS.store(tests, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a normalized value is in an `AnyOf`'s sorted set.
fn in_set(values: &[Vec<u8>], v: &[u8]) -> bool {
    values.binary_search_by(|x| x.as_slice().cmp(v)).is_ok()
}

/// True if some value of the attribute, normalized by `rule`, passes `test`;
/// Undefined if none passes and some value had no normal form.
fn any_value(e: &EntryView<'_>, attr: &Names, rule: Rule, mut test: impl FnMut(&[u8]) -> bool) -> Option<bool> {
    let mut undefined = false;
    for a in e.attrs().filter(|a| spend() && attr.covers(a.name)) {
        for v in a.vals() {
            if !spend_on(v) {
                return None;
            }
            match rule.normalize(v) {
                Some(n) if test(&n) => return Some(true),
                Some(_) => {}
                None => undefined = true,
            }
        }
    }
    (!undefined).then_some(false)
}

fn substrings(value: &[u8], initial: Option<&[u8]>, any: &[Vec<u8>], last: Option<&[u8]>) -> bool {
    let mut rest = value;
    if let Some(init) = initial {
        if !rest.starts_with(init) {
            return false;
        }
        rest = &rest[init.len()..];
    }
    for piece in any {
        match find(rest, piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    last.is_none_or(|l| rest.ends_with(l))
}

/// Linear in the haystack whatever the needle (a window-by-window compare
/// costs their product: a 1 KB piece in a 1 MB value, a billion steps).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// Whether an extensible item tests attribute `name`: its type's, or
/// without a type every attribute whose syntax the rule takes (RFC 4511
/// §4.5.1.7.7).
fn extensible_covers(attr: &Option<Names>, rule: Rule, name: &str) -> bool {
    match attr {
        Some(a) => a.covers(name),
        None => schema::get().attr(name).is_some_and(|at| rule.info().usable_with(at)),
    }
}

fn extensible_eval(
    e: &EntryView<'_>,
    attr: &Option<Names>,
    rule: Rule,
    want: &[u8],
    dn_attrs: bool,
    less: bool,
) -> Option<bool> {
    let ours = |name: &str| extensible_covers(attr, rule, name);
    // A value the rule cannot compare makes the item Undefined unless
    // another value matches; so does a value of the named type the rule
    // cannot normalize (slapd: objectClass's names under
    // objectIdentifierMatch), where a type-less item passes it by.
    let undefined = std::cell::Cell::new(false);
    let hit = |v: &[u8]| {
        spend_on(v)
            && match rule.normalize(v) {
                Some(n) => rule_matches(rule, less, &n, want).unwrap_or_else(|| {
                    undefined.set(true);
                    false
                }),
                None => {
                    undefined.set(undefined.get() || attr.is_some());
                    false
                }
            }
    };
    if e.attrs().filter(|a| spend() && ours(a.name)).any(|a| a.vals().any(&hit)) {
        return Some(true);
    }
    if dn_attrs {
        let dn = Dn::parse(e.dn()).ok()?;
        let in_dn = dn
            .rdns()
            .iter()
            .flat_map(|r| r.avas.iter())
            .any(|ava| ours(&matching::stored_name(&ava.attr)) && hit(&ava.value));
        if in_dn {
            return Some(true);
        }
    }
    (!undefined.get()).then_some(false)
}

/// One normalized value against an extensible match's assertion; `None`
/// when the rule cannot compare them: as slapd's (strtoll), the bit rules
/// take only 64-bit integers, and any other is an error, not a mismatch.
fn rule_matches(rule: Rule, less: bool, have: &[u8], want: &[u8]) -> Option<bool> {
    let bits = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|s| s.parse::<i64>().ok());
    Some(match rule {
        Rule::IntegerBitAnd | Rule::IntegerBitOr => {
            let (h, w) = (bits(have)?, bits(want)?);
            if rule == Rule::IntegerBitAnd {
                h & w == w
            } else {
                h & w != 0
            }
        }
        _ if less => rule.order_key(have) < rule.order_key(want),
        Rule::DnSubtree | Rule::DnOneLevel | Rule::DnSubordinate | Rule::DnSuperior => rule.dn_relates(have, want),
        _ => have == want,
    })
}

/// The Assertion control (RFC 4528): `assertionFailed` unless the entry
/// matches the control's filter.
/// Bounded by `set_assertion_tests` (it runs in the owner's write batch,
/// where a long evaluation would hold every write of the shard).
pub fn check_assertion(assertion: Option<&LdapFilter>, entry: &EntryView<'_>) -> crate::Result<()> {
    let Some(f) = assertion else { return Ok(()) };
    check_assertion_node(&compile(f), entry)
}

/// `check_assertion` with the filter compiled (and maybe some of its items
/// decided: `with_decided`).
pub fn check_assertion_node(node: &Node, entry: &EntryView<'_>) -> crate::Result<()> {
    let tests = ASSERTION_TESTS.load(std::sync::atomic::Ordering::Relaxed);
    match node.eval_bounded(entry, &|_| true, tests)? {
        Some(true) => Ok(()),
        _ => Err(crate::Error::new(
            ldap3_proto::LdapResultCode::AssertionFailed,
            "the assertion control's filter does not match",
        )),
    }
}

/// Evaluates an uncompiled filter once (the root DSE, `cn=Subschema`).
pub fn matches(f: &LdapFilter, e: &EntryView<'_>) -> bool {
    compile(f).matches(e)
}
