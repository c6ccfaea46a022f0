"""Writes the small built-in data `make demo` uses (demo/data/), reproducibly.

All text here was written for this project: sentence templates about everyday life and
short product / film / restaurant reviews, filled from word lists with a seeded RNG. The
output is committed; rerun to regenerate it byte for byte:

    python -m demo.make_demo_data            # writes demo/data/*
    python -m demo.make_demo_data --check    # exits 1 if the committed files differ

Files:
  corpus.txt              pretraining corpus: one sentence per line, a blank line between
                          documents (the format of create_pretraining_data / build_vocab)
  sentiment_train.tsv     GLUE SST-2 format: header "sentence<TAB>label", 1 = positive
  sentiment_dev.tsv       same format, reviews built from held-out template combinations
  sentiment_test.tsv      header "index<TAB>sentence" (no labels, as GLUE test files)
  korean/*                the Korean sample of `make demo-korean`
                          (demo/make_korean_demo_data.py makes its text)

Example:

>>> docs = make_corpus(seed=1, num_documents=2)
>>> len(docs), all(len(d) >= 8 for d in docs)
(2, True)
>>> rows = make_reviews(random.Random(0), 4, label=1)
>>> [label for _, label in rows]
[1, 1, 1, 1]
"""

from __future__ import annotations

import os
import random
import sys
from typing import Dict, List, Sequence, Tuple

from demo import make_korean_demo_data

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SEED = 20261122

# ---------------------------------------------------------------------------------------
# Word lists shared by the corpus and the reviews.

NAMES = ["Anna", "Ben", "Clara", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Keiko", "Leo", "Maya", "Nikolai", "Olivia", "Pablo", "Rosa", "Samuel", "Tara",
         "Victor", "Wen", "Yusuf", "Zoe", "Mina", "Oscar", "Priya", "Ruth", "Tomas"]
RELATIVES = ["sister", "brother", "aunt", "uncle", "cousin", "grandmother", "grandfather",
             "neighbour", "best friend", "roommate", "colleague"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "March", "April", "May", "June", "July", "September", "October",
          "November", "December"]
TIMES = ["early in the morning", "just after lunch", "in the late afternoon",
         "before dinner", "late in the evening", "around noon", "at sunrise"]
TOWNS = ["the old town", "the harbour district", "the village by the lake", "the city centre",
         "the quiet suburb", "the hill town", "the market town", "the seaside town"]
WEATHER = ["it was raining lightly", "the sky was clear and blue", "a cold wind was blowing",
           "the air was warm and still", "thick fog covered the streets",
           "snow had fallen during the night", "the sun came out between the clouds"]
FEELINGS = ["tired but happy", "calm and relaxed", "a little nervous", "proud of the result",
            "hungry after the long day", "grateful for the help", "surprised and pleased"]

# ---------------------------------------------------------------------------------------
# Corpus: each topic has an opening, middle sentences (used in shuffled order, each at
# most once) and a closing, so a document reads as one short story.

TOPICS: Dict[str, Dict[str, object]] = {
    "bread": {
        "slots": {"bread": ["a round loaf of rye bread", "a simple white loaf",
                            "a braided loaf with seeds", "a sourdough loaf"],
                  "flour": ["whole wheat flour", "rye flour", "strong white flour"]},
        "open": ["On {day}, {name} decided to bake {bread} at home.",
                 "{name} had wanted to learn how to bake {bread} for a long time."],
        "middle": [
            "The recipe asked for {flour}, water, salt and a little yeast.",
            "{name} mixed the dough in a large bowl and kneaded it for ten minutes.",
            "The dough had to rest in a warm place until it doubled in size.",
            "While it was rising, {name} cleaned the kitchen and made a cup of tea.",
            "Outside, {weather}, which made the warm kitchen feel even cosier.",
            "After two hours the dough was soft and full of small bubbles.",
            "{name} shaped it gently and placed it on a tray dusted with flour.",
            "The oven was heated as high as it would go.",
            "Soon the whole flat smelled of fresh bread.",
            "{name}'s {relative} came in and asked when it would be ready.",
            "The crust turned a deep golden brown after forty minutes.",
            "{name} tapped the bottom of the loaf, and it sounded hollow, which is a good sign.",
            "It is hard to wait, but bread should cool before it is cut.",
            "The first slice was still a little warm and very soft inside.",
        ],
        "close": ["{name} felt {feeling} and promised to bake again next week.",
                  "They ate the bread with butter and honey, and nothing was left by evening."],
    },
    "garden": {
        "slots": {"plant": ["tomatoes", "beans", "sunflowers", "strawberries", "potatoes",
                            "lettuce", "carrots"],
                  "tool": ["a spade", "a rake", "a watering can", "a wheelbarrow"]},
        "open": ["In {month}, {name} started a small vegetable garden behind the house.",
                 "{name} rented a small plot in the community garden of {town}."],
        "middle": [
            "The soil was hard at first, so {name} dug it over with {tool}.",
            "A neighbour gave advice about when to plant {plant}.",
            "{name} watered the young plants {time}, when the sun was not too strong.",
            "Snails were a problem, and some leaves had holes in them.",
            "After a few weeks the first {plant} began to appear.",
            "Birds visited the garden every day to look for worms.",
            "{name}'s {relative} helped to build a small fence out of old wood.",
            "On hot days the plants needed a lot of water.",
            "Weeds grew quickly, so pulling them out became a weekly job.",
            "One morning {weather}, and the garden looked fresh and green.",
            "The harvest was small, but everything tasted better than food from the shop.",
            "{name} kept a notebook with the dates of planting and picking.",
        ],
        "close": ["By the end of the summer, {name} felt {feeling}.",
                  "Next year {name} wants to grow {plant} as well."],
    },
    "train": {
        "slots": {"city": ["the capital", "the coast", "the mountains", "a city in the north",
                           "the university town"],
                  "snack": ["a cheese sandwich", "an apple", "a bag of nuts", "a cup of coffee"]},
        "open": ["{name} took the train to {city} on {day} {time}.",
                 "Last {month}, {name} travelled by train to visit {a_relative} in {city}."],
        "middle": [
            "The station was busy, and the departure board showed a short delay.",
            "{name} found a seat by the window and put the bag on the rack.",
            "The train left the city and passed fields, rivers and small villages.",
            "A conductor checked the tickets and wished everyone a pleasant journey.",
            "{name} read a book for a while and then looked out of the window.",
            "Outside, {weather}.",
            "A family with two small children sat across the aisle.",
            "In the dining car {name} bought {snack}.",
            "The journey took almost four hours, but it did not feel long.",
            "At one station many students got on with large backpacks.",
            "The train slowed down as it crossed an old stone bridge.",
            "When the train arrived, the platform was full of people waiting.",
        ],
        "close": ["{name} stepped off the train feeling {feeling}.",
                  "{name} decided that the train is the most pleasant way to travel."],
    },
    "market": {
        "slots": {"fruit": ["cherries", "peaches", "plums", "pears", "oranges", "grapes"],
                  "vegetable": ["peppers", "onions", "mushrooms", "cucumbers", "leeks"]},
        "open": ["Every {day}, {name} goes to the market in {town}.",
                 "{name} went to the farmers' market {time} to buy food for the week."],
        "middle": [
            "The stalls were full of {fruit}, {vegetable} and fresh herbs.",
            "A farmer offered {name} a piece of fruit to taste.",
            "The {fruit} were sweet and cheaper than in the supermarket.",
            "There was a long queue at the bakery stall.",
            "{name} met {a_relative} near the flower stand, and they talked for a while.",
            "A street musician played the violin near the fountain.",
            "{name} bought a kilo of {vegetable} and a small jar of honey.",
            "The fish seller shouted the prices of the day.",
            "Some stalls sold cheese from the farms in the valley.",
            "By noon the best {fruit} were already gone.",
            "{name} carried everything home in two heavy cloth bags.",
            "That day {weather}, so the market was busier than usual.",
        ],
        "close": ["{name} cooked a large soup with the {vegetable} that evening.",
                  "Going to the market has become {name}'s favourite part of the week."],
    },
    "school": {
        "slots": {"subject": ["history", "biology", "mathematics", "music", "geography",
                              "chemistry"],
                  "project": ["a model of the solar system", "a short film",
                              "a poster about rivers", "a small newspaper"]},
        "open": ["On {day}, {name}'s class started a new project in {subject}.",
                 "{name} teaches {subject} at a small school in {town}."],
        "middle": [
            "The students worked in groups of four to prepare {project}.",
            "Some of them were shy at first, but soon everyone had ideas.",
            "The teacher explained the task and wrote the plan on the board.",
            "They went to the library to look for books and old maps.",
            "One group asked many questions and stayed after the lesson.",
            "During the break the children played football in the yard.",
            "A parent visited the class to talk about her work as an engineer.",
            "The classroom became messy, with paper and glue everywhere.",
            "By {day} the work was almost finished.",
            "Each group presented its results to the rest of the class.",
            "The head teacher came to watch and asked the students about their work.",
            "Everyone agreed that learning together was more fun than learning alone.",
        ],
        "close": ["At the end of the week the students felt {feeling}.",
                  "The best work was shown in the school hall for a month."],
    },
    "dog": {
        "slots": {"dog": ["a small brown dog", "an old grey dog", "a lively puppy",
                          "a large black dog"],
                  "dogname": ["Pepper", "Biscuit", "Luna", "Max", "Toby", "Daisy"]},
        "open": ["{name} adopted {dog} called {dogname} from the animal shelter.",
                 "Every morning {name} takes {dogname}, {dog}, for a long walk."],
        "middle": [
            "{dogname} was afraid of the vacuum cleaner for the first few weeks.",
            "They walked through the park {time}, when it was quiet.",
            "{dogname} loves to chase sticks and to swim in the river.",
            "The neighbours' children often ask if they can play with {dogname}.",
            "{name} bought a new collar and a soft bed for the dog.",
            "At the vet, {dogname} was calm and got a biscuit afterwards.",
            "On rainy days {dogname} prefers to sleep by the heater.",
            "{name}'s {relative} sometimes looks after the dog during holidays.",
            "Training took patience, but {dogname} learned to sit and wait.",
            "In the park {dogname} made friends with a white cat.",
            "That afternoon {weather}, and they came home wet and muddy.",
        ],
        "close": ["{name} says that life with {dogname} is never boring.",
                  "After the walk they were both {feeling}."],
    },
    "bicycle": {
        "slots": {"part": ["the chain", "the back tyre", "the brakes", "the front light"],
                  "route": ["along the river", "through the forest", "around the lake",
                            "over the hills"]},
        "open": ["{name} found an old bicycle in the shed and decided to repair it.",
                 "On {day}, {name} went for a long ride {route}."],
        "middle": [
            "{part} needed to be replaced before the bicycle was safe to ride.",
            "A small shop in {town} sold the parts at a fair price.",
            "{name} watched a video to learn how to adjust {part}.",
            "The work took the whole afternoon, and {name}'s hands were black with oil.",
            "The first ride {route} was slow but very pleasant.",
            "{weather}, so {name} wore a warm jacket.",
            "On the way {name} stopped at a café for a glass of water.",
            "A group of cyclists passed and waved.",
            "The path was narrow and full of stones in some places.",
            "{name}'s {relative} joined for the last part of the trip.",
            "Going up the hill was hard, but the view from the top was worth it.",
            "They counted almost forty kilometres at the end of the day.",
        ],
        "close": ["{name} now rides to work every day and feels {feeling}.",
                  "The old bicycle works like new, and {name} is very proud of it."],
    },
    "library": {
        "slots": {"book": ["a novel about a lighthouse keeper", "a book about birds",
                           "a history of the city", "a collection of short stories",
                           "a guide to the night sky"]},
        "open": ["{name} spent {day} afternoon at the public library in {town}.",
                 "The library in {town} is {name}'s favourite quiet place."],
        "middle": [
            "The reading room was bright, with tall windows and long tables.",
            "{name} borrowed {book} and sat down near the window.",
            "A librarian helped to find an old newspaper from the archive.",
            "Children listened to a story in the corner for young readers.",
            "Outside, {weather}, but inside it was warm and silent.",
            "{name} wrote notes in a small notebook.",
            "Many students were studying for their exams.",
            "The library also lends music, films and even tools.",
            "There was a small exhibition of old photographs of the town.",
            "{name}'s {relative} called to ask about dinner, so {name} whispered and went outside.",
            "The books had to be returned within three weeks.",
        ],
        "close": ["{name} went home with three books and felt {feeling}.",
                  "{name} plans to come back next {day}."],
    },
    "moving": {
        "slots": {"room": ["the kitchen", "the living room", "the bedroom", "the small balcony"],
                  "item": ["a heavy bookshelf", "an old piano", "a glass table",
                           "boxes of books"]},
        "open": ["In {month}, {name} moved to a new flat in {town}.",
                 "After five years in the same place, {name} decided to move house."],
        "middle": [
            "Packing took much longer than expected.",
            "{name}'s {relative} came to help with the boxes.",
            "Carrying {item} down the stairs was the hardest part.",
            "The new flat was smaller, but {room} was full of light.",
            "On the first night there was no internet and no curtains.",
            "{name} painted {room} a soft green colour.",
            "The neighbours introduced themselves and brought a cake.",
            "Many things were broken or lost during the move.",
            "On the day of the move {weather}, which made everything harder.",
            "Little by little the flat began to feel like home.",
            "{name} found a good bakery and a small park nearby.",
        ],
        "close": ["After a month {name} felt {feeling} in the new home.",
                  "They held a small party to thank everyone who had helped."],
    },
    "football": {
        "slots": {"team": ["the local team", "the school team", "the women's team",
                           "the youth team"],
                  "score": ["two to one", "three to two", "one to nothing", "two to two"]},
        "open": ["On {day}, {name} went to watch {team} play in {town}.",
                 "{name} plays for {team} every weekend."],
        "middle": [
            "The stadium was small, but the crowd was loud and cheerful.",
            "Before the match the players warmed up on the wet grass.",
            "{weather}, and the ball was hard to control.",
            "The first half was slow and neither team scored.",
            "In the second half the home team attacked again and again.",
            "A young player scored a beautiful goal from far away.",
            "The goalkeeper saved a penalty in the last minutes.",
            "{name}'s {relative} cheered loudly at every chance.",
            "The referee made a decision that many people did not like.",
            "The final score was {score}.",
            "After the game the players thanked the fans.",
        ],
        "close": ["{name} went home {feeling}.",
                  "The next match is in two weeks, and {name} already has a ticket."],
    },
    "concert": {
        "slots": {"music": ["a string quartet", "a jazz band", "a choir", "a young pianist",
                            "a folk group"],
                  "hall": ["an old church", "the town hall", "a small club",
                           "the open-air stage in the park"]},
        "open": ["On {day} evening, {name} went to hear {music} in {hall}.",
                 "{name}'s {relative} had two tickets for a concert by {music}."],
        "middle": [
            "The hall was almost full when they arrived.",
            "The lights went down and the audience became quiet.",
            "The first piece was slow and gentle.",
            "Later the music became faster and people started clapping along.",
            "{name} closed both eyes and simply listened.",
            "During the break they bought a drink and talked about the music.",
            "The musicians played without any notes in front of them.",
            "At the end the audience stood up and asked for more.",
            "{music} played one more short song as a gift.",
            "Outside, {weather}, and the streets were quiet.",
        ],
        "close": ["{name} walked home humming the melody and feeling {feeling}.",
                  "It was one of the best evenings of the year."],
    },
    "camping": {
        "slots": {"place": ["a lake in the forest", "a valley in the mountains",
                            "a beach with high dunes", "a field near a river"]},
        "open": ["In {month}, {name} and {a_relative} went camping by {place}.",
                 "{name} planned a weekend of camping by {place}."],
        "middle": [
            "They packed a tent, sleeping bags, a small stove and plenty of food.",
            "Finding a flat place for the tent took some time.",
            "In the evening they made a fire and cooked pasta.",
            "The stars were brighter than in the city.",
            "During the night {name} heard an owl and the sound of the wind.",
            "In the morning {weather}.",
            "They walked for hours and saw deer between the trees.",
            "The water was cold but clear.",
            "A mosquito kept {name} awake for half of the night.",
            "They took all their rubbish home with them.",
            "On the last evening they sat by the fire and told old stories.",
        ],
        "close": ["They came home dirty, tired and very happy.",
                  "{name} wants to go camping again before the end of the summer."],
    },
    "doctor": {
        "slots": {"problem": ["a bad cough", "a pain in the knee", "a high fever",
                              "trouble sleeping"]},
        "open": ["{name} had {problem} for a week and finally went to the doctor.",
                 "On {day}, {name} made an appointment because of {problem}."],
        "middle": [
            "The waiting room was full, so {name} read an old magazine.",
            "The doctor was friendly and listened carefully.",
            "She asked many questions and checked {name}'s heart and lungs.",
            "It was nothing serious, but rest was important.",
            "{name} got a prescription and went to the pharmacy next door.",
            "The pharmacist explained how often to take the medicine.",
            "{name}'s {relative} brought soup and fruit in the evening.",
            "For three days {name} stayed at home and slept a lot.",
            "Slowly the problem went away.",
            "The doctor asked {name} to come back if it did not get better.",
        ],
        "close": ["After a week {name} felt much better.",
                  "{name} was {feeling} and went back to work on {day}."],
    },
    "museum": {
        "slots": {"museum": ["the history museum", "a small art gallery",
                             "the science museum", "the railway museum"],
                  "exhibit": ["old maps of the region", "paintings of the sea",
                              "a huge steam engine", "tools from the stone age"]},
        "open": ["On a {day} {time}, {name} visited {museum} in {town}.",
                 "{name} took {a_relative} to {museum} for a birthday treat."],
        "middle": [
            "The building itself was beautiful, with high ceilings and marble floors.",
            "The most famous room showed {exhibit}.",
            "A guide told stories about the people who lived here long ago.",
            "School groups moved from room to room with their teachers.",
            "{name} stood for a long time in front of one small picture.",
            "Some rooms allowed visitors to touch and try things.",
            "The café on the top floor had a view over the roofs.",
            "Whatever the weather, a museum is a good place to spend the day.",
            "In the shop {name} bought a postcard and a book.",
            "There was so much to see that they could not finish in one day.",
        ],
        "close": ["{name} left the museum {feeling}.",
                  "They agreed to come back when the new exhibition opens."],
    },
    "restaurant": {
        "slots": {"dish": ["grilled fish", "vegetable curry", "mushroom soup",
                           "roast chicken", "fresh pasta", "a lemon cake"],
                  "place": ["a small family restaurant", "a new place by the river",
                            "an old inn in the hills"]},
        "open": ["For {a_relative}'s birthday, {name} booked a table at {place}.",
                 "On {day}, {name} tried {place} that had just opened in {town}."],
        "middle": [
            "The room was warm and the staff were friendly.",
            "The menu was short, which is often a good sign.",
            "{name} ordered {dish}, and it arrived quickly.",
            "The food was delicious and the portions were generous.",
            "The waiter recommended a local juice that was excellent.",
            "Some dishes were a little too salty for {name}.",
            "The dessert was the best part of the meal.",
            "A musician played the guitar quietly in the corner.",
            "The bill was fair for such good food.",
            "Outside, {weather}, so they stayed for another cup of tea.",
        ],
        "close": ["They left {feeling} and promised to return.",
                  "{name} wrote a warm review of the restaurant the next day."],
    },
    "winter": {
        "slots": {"activity": ["built a snowman", "went skating on the pond",
                               "went sledging down the hill", "had a snowball fight"]},
        "open": ["The first snow of the winter fell in {town} on a {day}.",
                 "In {month} the winter was colder than anyone could remember."],
        "middle": [
            "{name} woke up and saw that everything outside was white.",
            "Schools were closed, and the children were delighted.",
            "{name} and {a_relative} {activity}.",
            "The roads were icy, so most people stayed at home.",
            "{name} made hot chocolate and lit a candle by the window.",
            "The old trees in the park looked like a painting.",
            "Birds came to the window to eat the seeds {name} had put out.",
            "In the evening the snow stopped and the sky became clear.",
            "The next morning {weather}.",
            "Walking to the shop took twice as long as usual.",
        ],
        "close": ["By the end of the day {name} was cold but {feeling}.",
                  "A week later the snow melted, and the streets were wet and grey again."],
    },
}

FILLERS = {"day": DAYS, "month": MONTHS, "time": TIMES, "town": TOWNS, "weather": WEATHER,
           "feeling": FEELINGS, "relative": RELATIVES}


def _article(word: str) -> str:
    """'a' or 'an' + word, by the first letter (enough for these word lists).

    >>> _article("aunt"), _article("brother")
    ('an aunt', 'a brother')
    """
    return ("an " if word[0] in "aeiou" else "a ") + word


def _fill(template: str, slots: Dict[str, str]) -> str:
    """Fills a template; sentences start with a capital letter."""
    text = template.format(**slots)
    return text[0].upper() + text[1:]


def make_document(rng: random.Random, topic: str) -> List[str]:
    """One document: an opening, 6-10 middle sentences in random order, a closing.

    >>> doc = make_document(random.Random(0), "bread")
    >>> 8 <= len(doc) <= 12 and all(s.endswith(".") for s in doc)
    True
    """
    spec = TOPICS[topic]
    slots = {key: rng.choice(values) for key, values in FILLERS.items()}
    slots.update({key: rng.choice(values) for key, values in spec["slots"].items()})
    slots["name"] = rng.choice(NAMES)
    slots["a_relative"] = _article(slots["relative"])
    middle = list(spec["middle"])
    rng.shuffle(middle)
    chosen = [rng.choice(spec["open"])] + middle[:rng.randint(6, 10)] + [rng.choice(spec["close"])]
    sentences = []
    for template in chosen:
        # Weather and time vary from sentence to sentence; names stay for the document.
        slots["weather"] = rng.choice(WEATHER)
        slots["time"] = rng.choice(TIMES)
        sentences.append(_fill(template, slots))
    return sentences


def make_corpus(seed: int = SEED, num_documents: int = 260) -> List[List[str]]:
    """`num_documents` documents cycling through the topics in a shuffled order."""
    rng = random.Random(seed)
    topics = sorted(TOPICS)
    docs = []
    while len(docs) < num_documents:
        rng.shuffle(topics)
        for topic in topics[:num_documents - len(docs)]:
            docs.append(make_document(rng, topic))
    return docs


# ---------------------------------------------------------------------------------------
# Sentiment reviews: what is reviewed, then clearly positive or negative judgements.

ITEMS = [("film", "the film"), ("film", "this movie"), ("film", "the new comedy"),
         ("film", "the documentary"), ("food", "the restaurant"), ("food", "the soup"),
         ("food", "this café"), ("food", "the pizza"), ("product", "this phone"),
         ("product", "the speaker"), ("product", "this kettle"), ("product", "the backpack"),
         ("stay", "the hotel"), ("stay", "our room"), ("book", "the novel"),
         ("book", "this cookbook"), ("show", "the concert"), ("show", "the play")]
POSITIVE = {
    "adj": ["wonderful", "excellent", "delightful", "fantastic", "lovely", "brilliant",
            "superb", "charming", "impressive", "great"],
    "film": ["the acting was warm and believable", "the story kept me smiling",
             "the ending was moving and beautiful", "every scene was a pleasure to watch"],
    "food": ["the food was fresh and full of flavour", "the staff were kind and quick",
             "every bite was delicious", "the prices were fair and the portions generous"],
    "product": ["it works perfectly", "the battery lasts for days",
                "it feels solid and well made", "it was worth every penny"],
    "stay": ["the bed was comfortable and the room spotless", "the staff were very helpful",
             "the view from the window was beautiful", "breakfast was generous and tasty"],
    "book": ["the writing is clear and elegant", "I could not put it down",
             "the recipes are easy and delicious", "the characters feel real and lovable"],
    "show": ["the performers were full of energy", "the music was beautiful",
             "the audience loved every minute", "the sound was clear and rich"],
    "end": ["I loved it.", "Highly recommended.", "A real joy.", "I will recommend it to all my friends.", "Absolutely worth it.",
            "Five stars from me.", "What a pleasant surprise."],
}
NEGATIVE = {
    "adj": ["terrible", "awful", "disappointing", "boring", "dreadful", "poor", "annoying",
            "miserable", "horrible", "useless"],
    "film": ["the acting was wooden and fake", "the story made no sense",
             "the ending was silly and rushed", "I nearly fell asleep halfway through"],
    "food": ["the food was cold and tasteless", "the staff were rude and slow",
             "the plates were dirty", "it was far too expensive for such bad food"],
    "product": ["it broke after two days", "the battery dies within hours",
                "it feels cheap and flimsy", "it was a waste of money"],
    "stay": ["the room was dirty and noisy", "the staff ignored our complaints",
             "the shower did not work", "the bed was hard and uncomfortable"],
    "book": ["the writing is dull and clumsy", "I gave up after three chapters",
             "the recipes simply do not work", "the characters are flat and annoying"],
    "show": ["the performers seemed bored", "the sound was awful",
             "half the audience left early", "it started an hour late"],
    "end": ["I hated it.", "Avoid it.", "A complete waste of time.", "Skip it.", "What a disappointment.", "One star is too many.",
            "I want my money back."],
}
REVIEW_TEMPLATES = [
    "{Item} was {adj}.",
    "{Item} was {adj} and {reason}.",
    "{Item} was {adj}: {reason}. {end}",
    "Honestly, {item} was {adj}, and {reason}.",
    "{Reason}. {end}",
    "What {a_adj} experience. {Reason}.",
    "{Item} was {adj}. {end}",
    "I thought {item} was {adj} because {reason}.",
    "{Reason}, so {item} was {adj} overall. {end}",
]


def make_reviews(rng: random.Random, n: int, label: int,
                 templates: Sequence[str] = REVIEW_TEMPLATES) -> List[Tuple[str, int]]:
    """`n` distinct short reviews with sentiment `label` (1 positive, 0 negative)."""
    words = POSITIVE if label == 1 else NEGATIVE
    rows, seen = [], set()
    while len(rows) < n:
        kind, item = rng.choice(ITEMS)
        reason = rng.choice(words[kind])
        adj = rng.choice(words["adj"])
        slots = {"item": item, "Item": item[0].upper() + item[1:], "adj": adj, "a_adj": _article(adj),
                 "reason": reason, "Reason": reason[0].upper() + reason[1:],
                 "end": rng.choice(words["end"])}
        text = rng.choice(templates).format(**slots)
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    return rows


def make_sentiment(seed: int = SEED) -> Dict[str, List[Tuple[str, int]]]:
    """train (400), dev (100) and test (20) rows, balanced, with no sentence in two splits.

    The dev and test sets use templates the training set never saw, so they measure
    whether the model learned the sentiment words rather than the sentence shapes.
    """
    rng = random.Random(seed + 1)
    train_t, held_t = REVIEW_TEMPLATES[:6], REVIEW_TEMPLATES[6:]
    train = make_reviews(rng, 200, 1, train_t) + make_reviews(rng, 200, 0, train_t)
    held = make_reviews(rng, 60, 1, held_t) + make_reviews(rng, 60, 0, held_t)
    rng.shuffle(train)
    rng.shuffle(held)
    return {"train": train, "dev": held[:100], "test": held[100:]}


# ---------------------------------------------------------------------------------------
# Files


def render_files(seed: int = SEED) -> Dict[str, str]:
    """File name -> exact file contents."""
    docs = make_corpus(seed)
    corpus = "\n".join("".join(s + "\n" for s in doc) for doc in docs)
    sets = make_sentiment(seed)
    files = {"corpus.txt": corpus}
    for split in ("train", "dev"):
        files[f"sentiment_{split}.tsv"] = "sentence\tlabel\n" + "".join(
            f"{text}\t{label}\n" for text, label in sets[split])
    files["sentiment_test.tsv"] = "index\tsentence\n" + "".join(
        f"{i}\t{text}\n" for i, (text, _) in enumerate(sets["test"]))
    files.update(make_korean_demo_data.render_files())
    return files


def main(argv: Sequence[str]) -> int:
    files = render_files()
    if "--check" in argv:
        stale = []
        for name, text in files.items():
            path = os.path.join(DATA_DIR, name)
            if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
                stale.append(path)
        for path in stale:
            print(f"{path} differs from what demo/make_demo_data.py writes; rerun it",
                  file=sys.stderr)
        return 1 if stale else 0
    os.makedirs(DATA_DIR, exist_ok=True)
    for name, text in files.items():
        path = os.path.join(DATA_DIR, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        print(f"wrote {path} ({len(text.encode('utf-8'))} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
