//! Access control in OpenLDAP's model (slapd.access(5)): an ordered list of
//! `to <what> by <who> <level> [stop|continue|break] ...` rules.
//!
//! - The first rule whose `<what>` covers the entry and attribute selects
//!   the rule; in it the first `<who>` that matches decides (`stop`), unless
//!   its control says to go on with the next clause (`continue`) or the
//!   next rule (`break`). Every rule ends with an implicit `by * none`, the
//!   list with an implicit `to * by * none`: default deny.
//! - Levels are cumulative: none < disclose < auth < compare < search <
//!   read < write < manage; a clause may instead grant an explicit set of
//!   privileges, `=wx` (write and auth, no read), as slapd's `=mwrscxd`.
//! - `entry` and `children` are the pseudo-attributes slapd uses: reading
//!   an entry at all needs `read` on `entry`; adding or deleting one needs
//!   `write` on its `entry` and on its parent's `children`.
//! - The root DN bypasses access control; callers never build an `Access`
//!   for it.
//!
//! Rules are compiled once at start (`parse`). Per operation an `Access`
//! binds them to the requester: which `<who>` clauses match is decided once
//! (group membership is looked up at most once per operation), so per
//! entry only `self`, `<what>` DN patterns and filters are evaluated, and
//! for rule sets such as the default one most attributes get a fixed answer
//! (`Access::fixed`) without looking at the entry at all.

pub mod check;
pub mod parse;

use regex::Regex;
use shards::dn::{key_below, key_depth, KEY_SEPARATOR};
use shards::entry::EntryView;
use shards::filter::{Names, Node};
use std::cell::RefCell;

/// The default rules: anonymous may bind, users may change their own
/// password (`=wx`: write and auth, not read), nobody but the root DN
/// reads a password hash, everything else is readable.
pub const DEFAULT_RULES: &[&str] = &[
    "to attrs=userPassword by self =wx by anonymous auth by * none",
    "to attrs=shadowLastChange by self write by * read",
    "to * by * read",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    Disclose,
    Auth,
    Compare,
    Search,
    Read,
    Write,
    Manage,
}

impl Level {
    pub const ALL: [Level; 8] = [
        Level::None,
        Level::Disclose,
        Level::Auth,
        Level::Compare,
        Level::Search,
        Level::Read,
        Level::Write,
        Level::Manage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Disclose => "disclose",
            Level::Auth => "auth",
            Level::Compare => "compare",
            Level::Search => "search",
            Level::Read => "read",
            Level::Write => "write",
            Level::Manage => "manage",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(s))
    }

    /// The privilege this level names, as a bit of `Privs` (none: 0).
    fn bit(self) -> u8 {
        match self {
            Level::None => 0,
            l => 1 << (l as u8 - 1),
        }
    }

    /// Everything this level grants: itself and every lower level.
    pub fn cumulative(self) -> Privs {
        Privs(((self.bit() as u16) << 1).saturating_sub(1) as u8)
    }
}

/// A set of privileges, one bit per level above none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Privs(u8);

/// slapd's letters for the privileges, by bit (disclose first).
const LETTERS: [char; 7] = ['d', 'x', 'c', 's', 'r', 'w', 'm'];

impl Privs {
    pub const NONE: Privs = Privs(0);

    /// Whether `level`'s privilege is granted (none always is).
    pub fn has(self, level: Level) -> bool {
        self.0 & level.bit() == level.bit()
    }

    /// `=wx`-style sets; `w` also stands for slapd's `a` and `z`
    /// (add and delete under write), `0` for none.
    pub fn parse(letters: &str) -> Option<Privs> {
        let mut bits = 0;
        for c in letters.chars() {
            bits |= match c {
                '0' => 0,
                'a' | 'z' => 1 << 5,
                c => 1 << LETTERS.iter().position(|l| *l == c)?,
            };
        }
        Some(Privs(bits))
    }

    /// `write (=wrscxd)`, or `=wx` for a set that is not a level.
    pub fn describe(self) -> String {
        let letters: String =
            LETTERS.iter().enumerate().rev().filter(|(i, _)| self.0 & (1 << i) != 0).map(|(_, c)| *c).collect();
        match Level::ALL.iter().find(|l| l.cumulative() == self) {
            Some(Level::None) => "none".into(),
            Some(l) => format!("{} (={letters})", l.name()),
            None => format!("={letters}"),
        }
    }
}

/// How a DN pattern (`dn.<style>=`) matches an entry's DN key.
#[derive(Debug, Clone)]
pub enum DnPattern {
    Base(Vec<u8>),
    One(Vec<u8>),
    Subtree(Vec<u8>),
    Children(Vec<u8>),
    /// Matched against the normalized string form (`uid=x,dc=example,dc=com`).
    Regex(Regex),
}

impl DnPattern {
    pub fn matches(&self, key: &[u8]) -> bool {
        let below = |base: &[u8]| key_below(key, base);
        match self {
            DnPattern::Base(base) => key == base.as_slice(),
            DnPattern::One(base) => below(base) && key_depth(key) == key_depth(base) + 1,
            DnPattern::Subtree(base) => key == base.as_slice() || below(base),
            DnPattern::Children(base) => key != base.as_slice() && below(base),
            DnPattern::Regex(re) => re.is_match(&norm_of_key(key)),
        }
    }
}

/// The normalized string form of a DN from its storage key (RDNs are
/// stored root first).
pub fn norm_of_key(key: &[u8]) -> String {
    let rdns: Vec<&[u8]> = if key.is_empty() { Vec::new() } else { key.split(|b| *b == KEY_SEPARATOR).collect() };
    let parts: Vec<String> = rdns.iter().rev().map(|r| String::from_utf8_lossy(r).into_owned()).collect();
    parts.join(",")
}

/// Which attributes a rule covers.
#[derive(Debug, Clone, Default)]
pub struct AttrList {
    pub entry: bool,
    pub children: bool,
    /// Indexes into `Acl::named`.
    pub types: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct What {
    pub dn: Option<DnPattern>,
    pub filter: Option<Node>,
    /// `None`: every attribute and both pseudo-attributes (`to *`).
    pub attrs: Option<AttrList>,
}

#[derive(Debug, Clone)]
pub enum Who {
    Any,
    Anonymous,
    Users,
    Itself,
    Dn(DnPattern),
    /// Members of a group: its DN key, the class it must have and the
    /// attribute listing members; `slot` caches the answer per operation.
    Group {
        key: Vec<u8>,
        class: String,
        attr: String,
        slot: usize,
    },
    Ssf(u32),
    TlsSsf(u32),
    TransportSsf(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Stop,
    Continue,
    Break,
}

#[derive(Debug, Clone)]
pub struct By {
    /// All must match.
    pub who: Vec<Who>,
    pub privs: Privs,
    pub control: Control,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub what: What,
    pub by: Vec<By>,
    pub text: String,
}

/// A per-identity override of the search limits (slapd's `limits`):
/// `Some(0)` is unlimited, `None` keeps the server's limit.
#[derive(Debug, Clone)]
pub struct LimitRule {
    pub who: Vec<Who>,
    pub size: Option<usize>,
    pub time_s: Option<u64>,
}

/// The compiled rule list.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    pub rules: Vec<Rule>,
    /// `limits.by_identity`, first match applies.
    pub limits: Vec<LimitRule>,
    /// `monitor.readers`: who besides the root DN reads cn=Monitor.
    pub monitor_readers: Vec<Vec<Who>>,
    /// Every attribute type some rule names, so an attribute can be
    /// classified once (`class`) and most decisions cached by class.
    named: Vec<Names>,
    /// `class("userPassword")`, kept as `named` grows: every bind asks.
    user_password: u64,
    pub group_slots: usize,
    /// Unique to each compiled list (`parse::compile`), for what is kept
    /// per reactor about it (`search::select`'s names): a reload compiles
    /// a new list, which may be allocated where the old one was. From 1;
    /// 0 (`Acl::default()`): not compiled, nothing is kept about it.
    pub id: u64,
}

/// An attribute as access control sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    Entry,
    Children,
    /// A type, as the bit set of `Acl::named` entries that cover it (0:
    /// named by no rule).
    Type(u64),
}

/// Who asks, and over what kind of connection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subject<'a> {
    /// The bound DN's key; `None` when anonymous.
    pub key: Option<&'a [u8]>,
    /// Security strength of TLS on the connection (0 without).
    pub tls_ssf: u32,
    /// Of the transport itself (the local socket counts as 71, as slapd).
    pub transport_ssf: u32,
}

/// Looks up group membership in the directory.
pub trait Groups {
    /// Whether the entry `group` has objectClass `class` and lists the DN
    /// with key `member` in `attr`.
    fn is_member(&self, group: &[u8], class: &str, attr: &str, member: &[u8]) -> bool;
}

/// What a decision was and which rule and clause made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub privs: Privs,
    /// `None`: the implicit final `to * by * none`.
    pub rule: Option<usize>,
    pub clause: Option<usize>,
}

/// The entry a decision is about.
pub struct Target<'a, 'v> {
    pub key: &'a [u8],
    /// Needed by rules with a filter; without it they do not apply.
    pub entry: Option<&'a EntryView<'v>>,
}

impl Acl {
    /// The class of a stored attribute description.
    pub fn class(&self, stored: &str) -> Attr {
        Attr::Type(self.type_bits(stored))
    }

    /// `class("userPassword")`, worked out when the rules were compiled.
    pub fn user_password(&self) -> Attr {
        Attr::Type(self.user_password)
    }

    /// Names one more attribute type the rules use (`parse`).
    pub(super) fn add_named(&mut self, names: Names) {
        self.named.push(names);
        self.user_password = self.type_bits("userPassword");
    }

    /// The class of an attribute description as a client spelled it
    /// (`2.5.4.35`, `commonName`): the rules name types, and a spelling
    /// must not step around them.
    pub fn class_of_request(&self, name: &str) -> Attr {
        self.class(&shards::matching::stored_name(name))
    }

    /// Calls `each` with the class of every stored attribute an item on
    /// `names` can match: its type and each subtype (`name`: `cn`, `sn`),
    /// and each with the options a rule names (`description;lang-en`).
    /// A class may come more than once.
    pub fn matched(&self, names: &Names, each: &mut dyn FnMut(u64)) {
        for t in names.type_names() {
            each(self.type_bits(t));
        }
        for n in self.named.iter().filter(|n| n.within(names)) {
            each(self.type_bits(&n.stored_description()));
        }
    }

    /// Which of `named` cover a stored attribute description.
    fn type_bits(&self, stored: &str) -> u64 {
        let mut bits = 0u64;
        for (i, n) in self.named.iter().enumerate() {
            if n.covers(stored) {
                bits |= 1 << i;
            }
        }
        bits
    }
}

impl AttrList {
    fn covers(&self, attr: Attr) -> bool {
        match attr {
            Attr::Entry => self.entry,
            Attr::Children => self.children,
            Attr::Type(bits) => self.types.iter().any(|i| bits & (1 << i) != 0),
        }
    }
}

impl What {
    fn covers_attr(&self, attr: Attr) -> bool {
        self.attrs.as_ref().is_none_or(|a| a.covers(attr))
    }

    fn applies(&self, target: &Target, attr: Attr) -> bool {
        self.covers_attr(attr)
            && self.dn.as_ref().is_none_or(|p| p.matches(target.key))
            && self.filter.as_ref().is_none_or(|f| target.entry.is_some_and(|e| f.matches(e)))
    }

    /// Whether the rule applies the same way to every entry.
    fn entry_independent(&self) -> bool {
        self.dn.is_none() && self.filter.is_none()
    }
}

/// The rules bound to one requester for one operation.
pub struct Access<'a> {
    acl: &'a Acl,
    subject: Subject<'a>,
    groups: &'a dyn Groups,
    memo: RefCell<Vec<Option<bool>>>,
}

/// Whether a `<who>` clause matches, as far as it can be known without the entry.
enum Matches {
    Yes,
    No,
    /// `self`: only for the requester's own entry.
    IfSelf,
}

impl<'a> Access<'a> {
    pub fn new(acl: &'a Acl, subject: Subject<'a>, groups: &'a dyn Groups) -> Access<'a> {
        Access { acl, subject, groups, memo: RefCell::new(Vec::new()) }
    }

    pub fn acl(&self) -> &Acl {
        self.acl
    }

    fn who_matches(&self, who: &[Who]) -> Matches {
        let mut result = Matches::Yes;
        for w in who {
            let ok = match w {
                Who::Any => true,
                Who::Anonymous => self.subject.key.is_none(),
                Who::Users => self.subject.key.is_some(),
                Who::Itself => {
                    if self.subject.key.is_none() {
                        return Matches::No;
                    }
                    result = Matches::IfSelf;
                    true
                }
                Who::Dn(p) => self.subject.key.is_some_and(|k| p.matches(k)),
                Who::Group { key, class, attr, slot } => self.in_group(key, class, attr, *slot),
                Who::Ssf(n) => self.subject.tls_ssf.max(self.subject.transport_ssf) >= *n,
                Who::TlsSsf(n) => self.subject.tls_ssf >= *n,
                Who::TransportSsf(n) => self.subject.transport_ssf >= *n,
            };
            if !ok {
                return Matches::No;
            }
        }
        result
    }

    fn in_group(&self, group: &[u8], class: &str, attr: &str, slot: usize) -> bool {
        let Some(me) = self.subject.key else { return false };
        if let Some(Some(known)) = self.memo.borrow().get(slot) {
            return *known;
        }
        let answer = self.groups.is_member(group, class, attr, me);
        let mut memo = self.memo.borrow_mut();
        if memo.len() < self.acl.group_slots {
            memo.resize(self.acl.group_slots, None);
        }
        memo[slot] = Some(answer);
        answer
    }

    /// The level granted on `attr` of the target entry, and why.
    /// Whether `attr` of the entry at `key` is decided whatever the entry
    /// holds: no rule that could apply there looks at its content (a
    /// `filter=`), so an answer without the entry is the answer with it.
    pub fn decided_by_dn(&self, key: &[u8], attr: Attr) -> bool {
        self.acl.rules.iter().all(|r| {
            r.what.filter.is_none() || !r.what.covers_attr(attr) || r.what.dn.as_ref().is_some_and(|p| !p.matches(key))
        })
    }

    pub fn decide(&self, target: &Target, attr: Attr) -> Decision {
        let mut decision = Decision { privs: Privs::NONE, rule: None, clause: None };
        'rules: for (i, rule) in self.acl.rules.iter().enumerate() {
            if !rule.what.applies(target, attr) {
                continue;
            }
            for (j, by) in rule.by.iter().enumerate() {
                let matched = match self.who_matches(&by.who) {
                    Matches::Yes => true,
                    Matches::No => false,
                    Matches::IfSelf => Some(target.key) == self.subject.key,
                };
                if matched {
                    decision = Decision { privs: by.privs, rule: Some(i), clause: Some(j) };
                    match by.control {
                        Control::Stop => return decision,
                        Control::Continue => continue,
                        Control::Break => continue 'rules,
                    }
                }
            }
            // The implicit `by * none stop` (or what `continue` left).
            if decision.rule != Some(i) {
                decision = Decision { privs: Privs::NONE, rule: Some(i), clause: None };
            }
            return decision;
        }
        decision
    }

    /// Whether the requester may read cn=Monitor (the root DN never gets here).
    pub fn reads_monitor(&self) -> bool {
        self.acl.monitor_readers.iter().any(|who| matches!(self.who_matches(who), Matches::Yes))
    }

    /// The size and time limit overrides of the first `limits.by_identity`
    /// rule that matches the requester (`self` never does).
    pub fn limits(&self) -> Option<&LimitRule> {
        self.acl.limits.iter().find(|l| matches!(self.who_matches(&l.who), Matches::Yes))
    }

    /// The level on `attr` when it is the same for every entry (no rule
    /// that could apply depends on the entry's DN, content or identity).
    pub fn fixed(&self, attr: Attr) -> Option<Privs> {
        for rule in &self.acl.rules {
            if !rule.what.covers_attr(attr) {
                continue;
            }
            if !rule.what.entry_independent() {
                return None;
            }
            for by in &rule.by {
                match self.who_matches(&by.who) {
                    Matches::No => {}
                    Matches::IfSelf => return None,
                    Matches::Yes if by.control == Control::Stop => return Some(by.privs),
                    Matches::Yes => return None,
                }
            }
            return Some(Privs::NONE);
        }
        Some(Privs::NONE)
    }

    /// Whether every entry may be returned to the requester, whatever it
    /// holds or wherever it is (no rule hides any).
    pub fn every_entry_readable(&self) -> bool {
        self.fixed(Attr::Entry).is_some_and(|p| p.has(Level::Read))
    }

    /// Whether `attr` of the target is granted at least `level`.
    pub fn allows(&self, target: &Target, attr: Attr, level: Level) -> bool {
        match self.fixed(attr) {
            Some(p) => p.has(level),
            None => self.decide(target, attr).privs.has(level),
        }
    }
}

/// Per-request answers for reading many entries (search): the entry-level
/// and per-class decisions that do not depend on the entry, computed once.
pub struct ReadPlan<'a> {
    pub access: Access<'a>,
    entry: Option<Privs>,
    /// Fixed privileges by attribute class, filled on first use.
    classes: RefCell<Vec<(u64, Option<Privs>)>>,
}

impl<'a> ReadPlan<'a> {
    pub fn new(access: Access<'a>) -> ReadPlan<'a> {
        let entry = access.fixed(Attr::Entry);
        ReadPlan { access, entry, classes: RefCell::new(Vec::new()) }
    }

    fn fixed_type(&self, bits: u64) -> Option<Privs> {
        if let Some((_, l)) = self.classes.borrow().iter().find(|(b, _)| *b == bits) {
            return *l;
        }
        let l = self.access.fixed(Attr::Type(bits));
        self.classes.borrow_mut().push((bits, l));
        l
    }

    /// Whether every entry may be returned to the requester, whatever it
    /// holds or wherever it is (no rule hides any).
    pub fn every_entry_readable(&self) -> bool {
        self.entry.is_some_and(|p| p.has(Level::Read))
    }

    /// Whether the entry-level decisions are the same for every entry
    /// (then `entry_disclosed` and `entry_readable` need no entry).
    pub fn entry_fixed(&self) -> bool {
        self.entry.is_some()
    }

    /// Whether the requester may learn that the entry exists.
    pub fn entry_disclosed(&self, target: &Target) -> bool {
        match self.entry {
            Some(p) => p.has(Level::Disclose),
            None => self.access.decide(target, Attr::Entry).privs.has(Level::Disclose),
        }
    }

    /// Whether the entry may be returned at all.
    pub fn entry_readable(&self, target: &Target) -> bool {
        match self.entry {
            Some(p) => p.has(Level::Read),
            None => self.access.decide(target, Attr::Entry).privs.has(Level::Read),
        }
    }

    /// Whether a stored attribute is granted `level` in the target entry.
    pub fn allows(&self, target: &Target, stored: &str, level: Level) -> bool {
        self.allows_class(target, self.class(stored), level)
    }

    /// The class of a stored attribute description, for `allows_class`.
    pub fn class(&self, stored: &str) -> u64 {
        self.access.acl.type_bits(stored)
    }

    pub fn allows_class(&self, target: &Target, bits: u64, level: Level) -> bool {
        match self.fixed_type(bits) {
            Some(p) => p.has(level),
            None => self.access.decide(target, Attr::Type(bits)).privs.has(level),
        }
    }

    /// Whether a `Guarded` filter assertion may be evaluated in the target:
    /// on every class of stored attribute it can match (`Acl::matched`).
    pub fn can_search(&self, target: &Target, names: &Names) -> bool {
        let mut ok = true;
        self.access.acl.matched(names, &mut |bits| ok = ok && self.allows_class(target, bits, Level::Search));
        ok
    }

    /// How a filter assertion on `names` may be searched.
    pub fn searchable(&self, names: Option<&Names>) -> shards::filter::Searchable {
        use shards::filter::Searchable;
        let Some(names) = names else {
            // A match over every attribute: only when all are searchable.
            return if self.access.acl.rules.iter().all(|r| r.what.attrs.is_none() && r.what.entry_independent()) {
                match self.fixed_type(0) {
                    Some(p) if p.has(Level::Search) => Searchable::Yes,
                    _ => Searchable::No,
                }
            } else {
                Searchable::No
            };
        };
        // Every class of stored attribute the item can match: all must be
        // searchable (slapd checks search on each stored description).
        let mut all = Searchable::Yes;
        self.access.acl.matched(names, &mut |bits| match self.fixed_type(bits) {
            Some(p) if p.has(Level::Search) => {}
            Some(_) => all = Searchable::No,
            None if all == Searchable::Yes => all = Searchable::Depends,
            None => {}
        });
        all
    }
}

#[cfg(test)]
mod tests;
