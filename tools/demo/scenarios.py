"""Workloads of the turbokv demo: conversations and documents whose requests share prefixes.

Two shapes, the two ways prefixes repeat in serving:

* ``Conversation``: one system prompt and several user turns. Request k is the whole history
  (system, earlier user turns and the model's own earlier replies) plus user turn k, so each
  request extends the previous one.
* ``DocumentQA``: one long document and several questions about it. The requests share the
  system prompt and the document and differ only in the question.

Prompts are rendered per model: SmolLM2 uses its ChatML template; stories260K (a 512-token
TinyStories model, no chat format) gets plain story text where a "turn" is a story cue.
The texts were written for this demo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Conversation:
    name: str
    system: str
    turns: Sequence[str]


@dataclasses.dataclass(frozen=True)
class DocumentQA:
    name: str
    system: str
    document: str
    questions: Sequence[str]


SUPPORT_SYSTEM = (
    "You are Ada, the support assistant of Northwind Trains, a regional rail company. "
    "Answer in two or three short sentences, in plain English. Be polite and concrete. "
    "Facts you may use: trains between Oakridge and Port Elling run every 30 minutes from "
    "5:30 to 23:30; a day pass costs 14 euros and a weekly pass 52 euros; children under six "
    "travel free; bicycles are allowed outside the rush hours of 7:00 to 9:00 and 16:30 to "
    "18:30; refunds are possible up to one hour before departure; lost items are kept at Port "
    "Elling station for 30 days. If you do not know something, say so and suggest calling "
    "the help line.")

RECIPE_SYSTEM = (
    "You are a friendly cooking assistant. Give clear, practical answers and keep them short.")

DOC_SYSTEM = ("You are a careful reading assistant. Answer questions using only the document "
              "the user gives you.")

LIGHTHOUSE_DOC = (
    "The Harwick Point lighthouse stands on a granite headland at the northern end of Calder "
    "Bay. It was built between 1851 and 1854 after two cargo ships were wrecked on the reef "
    "below the point in a single winter. The tower is 31 metres tall and is made of local stone "
    "painted white, with a red band below the lantern room. Its first light burned whale oil "
    "and could be seen 18 nautical miles away. In 1912 the oil lamp was replaced by a kerosene "
    "burner, and in 1958 the station was connected to mains electricity. The last keeper, "
    "Margaret Olsen, left in 1991 when the light was automated; she had lived at the station "
    "for 27 years with her husband and three children. Today the keeper's cottage is a small "
    "museum run by volunteers. It is open from April to October, and visitors can climb the "
    "112 steps to the gallery on Saturdays. The light still flashes white twice every ten "
    "seconds and is maintained by the national coastal authority.")

SOURDOUGH_DOC = (
    "A sourdough starter is a mixture of flour and water that hosts wild yeasts and lactic "
    "acid bacteria. To begin one, mix 50 grams of wholemeal rye flour with 50 grams of "
    "lukewarm water in a clean jar, cover it loosely, and leave it at room temperature. Every "
    "24 hours, discard about half of the mixture and feed the rest with another 50 grams of "
    "flour and 50 grams of water. After four to seven days the starter should double in size "
    "within six to eight hours of a feeding and smell pleasantly sour, like yoghurt or apples. "
    "A grey liquid on the surface, often called hooch, means the starter is hungry; pour it off "
    "and feed it. A pink or orange colour means harmful bacteria have taken over, and the "
    "starter should be thrown away. Once it is active, the starter can live in the "
    "refrigerator and be fed once a week. Take it out the day before baking and give it two "
    "feedings at room temperature so that it is strong enough to raise a loaf.")

SMOLLM2_SCENARIOS = [
    Conversation("support", SUPPORT_SYSTEM, [
        "Hi! How often do trains go from Oakridge to Port Elling?",
        "How much is a day pass?",
        "Can I bring my bike at 8 in the morning?",
        "I lost my umbrella on the train yesterday. What should I do?",
    ]),
    Conversation("cooking", RECIPE_SYSTEM, [
        "What can I cook tonight with eggs, spinach and cheese?",
        "How long should I bake it?",
        "Can I make it without an oven?",
    ]),
    DocumentQA("lighthouse", DOC_SYSTEM, LIGHTHOUSE_DOC, [
        "How tall is the lighthouse?",
        "Who was the last keeper and when did she leave?",
        "When can visitors climb the tower?",
    ]),
    DocumentQA("sourdough", DOC_SYSTEM, SOURDOUGH_DOC, [
        "What flour do I start with?",
        "What does a grey liquid on top mean?",
        "How do I get the starter ready for baking?",
    ]),
]

STORY_OPENING = ("Once upon a time, there was a little girl named Lily. She lived in a small "
                 "house with her mom and her dog, Max. Every morning, Lily and Max went to the "
                 "park to play.")
STORY_DOC = ("Tom had a big red ball. He liked to play with it in the garden. One day, the "
             "ball went over the fence and into the neighbour's yard. Tom was sad. He did not "
             "know what to do.")

STORIES_SCENARIOS = [
    Conversation("lily", "", [STORY_OPENING, " One day,", " Then", " The next morning,"]),
    DocumentQA("tom", "", STORY_DOC, [" Then Tom", " His mom said,", " The moral of the story"]),
]


def scenarios_for(model_key: str):
    return SMOLLM2_SCENARIOS if model_key == "smollm2" else STORIES_SCENARIOS


def render_conversation_prompt(model_key: str, conv: Conversation, users: list[str],
                               replies: list[str]) -> str:
    """Prompt text of the request for user turn ``len(users) - 1`` given earlier replies."""
    if model_key == "smollm2":
        from numpy_llm import format_chatml
        msgs: list[dict[str, str]] = [{"role": "system", "content": conv.system}]
        for i, u in enumerate(users):
            msgs.append({"role": "user", "content": u})
            if i < len(replies):
                msgs.append({"role": "assistant", "content": replies[i]})
        return format_chatml(msgs, add_generation_prompt=True)
    parts = []
    for i, u in enumerate(users):
        parts.append(u)
        if i < len(replies):
            parts.append(replies[i])
    return "".join(parts)


def render_document_prompt(model_key: str, doc: DocumentQA, question: str) -> str:
    if model_key == "smollm2":
        from numpy_llm import format_chatml
        return format_chatml([
            {"role": "system", "content": doc.system},
            {"role": "user", "content": f"Document:\n{doc.document}\n\nQuestion: {question}"},
        ], add_generation_prompt=True)
    return doc.document + question
