"""SceneGraphParser 0.1.0 (the official pipeline's parser) behind our ``Concept`` output: the ``sng`` parser."""
from __future__ import annotations

from data_schemas.scene_graphs import SPACY_MODEL
from pipeline.concepts import Concept


def make_sng(model: str = SPACY_MODEL):
    try:
        import sng_parser
    except ImportError as exc:
        raise ImportError("the 'sng' parser needs SceneGraphParser: pip install scenegraphparser==0.1.0") from exc
    parser = sng_parser.Parser("spacy", model=model)
    parser.unwrapped.nlp = lambda d: d
    return parser


def parse_doc_sng(doc, sng) -> list[Concept]:
    """Concepts from SceneGraphParser 0.1.0 (the official pipeline's parser) in our output format.

    ``sng`` is a ``sng_parser.Parser`` whose ``unwrapped.nlp`` returns the doc it is given.
    """
    graph = sng.parse(doc)
    concepts: list[Concept] = []
    ent_ids: dict[int, int] = {}
    toks_lower = [t.lower_ for t in doc]
    doc_text = doc.text

    def span(i0: int, i1: int) -> tuple[str, int, int]:
        s, e = doc[i0].idx, doc[i1 - 1].idx + len(doc[i1 - 1].text)
        return doc_text[s:e], s, e

    for k, ent in enumerate(graph["entities"]):
        lo, hi = ent["span_bounds"]
        head_words = ent["head"].lower().split()
        head_i = next((i for i in range(hi - 1, lo - 1, -1) if toks_lower[i] == head_words[-1]), hi - 1)
        if doc[head_i].pos_ == "PRON":
            continue
        text, s, e = span(head_i, head_i + 1)
        ent_ids[k] = len(concepts)
        concepts.append(Concept(len(concepts), "object", text, s, e, phrase=text, tokens=(head_i,)))
        for mod in ent.get("modifiers", []):
            if mod["dep"] not in ("amod", "nummod", "compound"):
                continue
            m_words = mod["span"].lower().split()
            m_i = next((i for i in range(lo, hi) if toks_lower[i] == m_words[0]), None)
            if m_i is None:
                continue
            mt, ms, me = span(m_i, m_i + len(m_words))
            concepts.append(Concept(len(concepts), "attribute", mt, ms, me, object_id=ent_ids[k],
                                    phrase=f"{mt} {text}", tokens=tuple(range(m_i, m_i + len(m_words)))))
    for rel in graph["relations"]:
        if rel["subject"] not in ent_ids or rel["object"] not in ent_ids:
            continue
        words = rel["relation"].lower().split()
        subj_end = graph["entities"][rel["subject"]]["span_bounds"][1]
        starts = [i for i in range(len(doc) - len(words) + 1) if toks_lower[i:i + len(words)] == words]
        if not starts:
            continue
        after = [i for i in starts if i >= subj_end]
        i0 = after[0] if after else starts[0]
        rt, rs, re_ = span(i0, i0 + len(words))
        sc, oc = concepts[ent_ids[rel["subject"]]], concepts[ent_ids[rel["object"]]]
        concepts.append(Concept(len(concepts), "relation", rt, rs, re_, subject_id=sc.concept_id,
                                object_id=oc.concept_id, phrase=f"{sc.text} {rt} {oc.text}",
                                tokens=tuple(range(i0, i0 + len(words)))))
    return concepts
