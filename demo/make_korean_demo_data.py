"""The Korean sample of `make demo-korean` (demo/data/korean/), written for this project.

Short Korean movie reviews made from phrase lists with a seeded RNG, in the two layouts
the Korean path reads: a pretraining corpus and NSMC's labelled files. They are as
informal as real reviews (ㅋㅋ, ㅠㅠ, missing spaces, English words, one empty review, as
NSMC has), and far too few to pretrain a useful model: they are here to show that every
step runs. `python -m demo.make_demo_data` writes them with the English data (and
`--check` compares them); this module only makes their text.

Files (under demo/data/):
  korean/corpus.txt         one review a line, a blank line between movies (pretraining)
  korean/ratings_train.txt  NSMC format: header `id<TAB>document<TAB>label`, 1 = positive
  korean/ratings_dev.txt    the same, reviews in no other file
  korean/ratings_test.txt   the same (labelled, as NSMC's test file is)

>>> rows = make_reviews(random.Random(0), 4, label=0, seen=set())
>>> [label for _, label in rows], len({text for text, _ in rows})
([0, 0, 0, 0], 4)
"""

from __future__ import annotations

import random
from typing import Dict, List, Set, Tuple

SEED = 20261129

# Invented titles; the corpus has one document per title.
TITLES = ["별빛 정거장", "마지막 여름", "검은 바다", "푸른 고양이", "도시의 밤", "바람의 노래",
          "작은 영웅", "겨울 편지", "시간 여행자", "붉은 달", "우리들의 계절", "비밀의 정원",
          "늦은 오후", "하얀 거짓말", "달리는 소년", "안녕 서울", "종이 비행기", "기억의 숲",
          "세 번째 문", "노을 버스", "조용한 이웃", "강철 심장", "여름밤의 꿈", "두 개의 태양",
          "잃어버린 지도", "마법 학교", "빗속의 약속", "황금 열쇠", "먼 바다", "첫눈",
          "유리 구두", "한밤의 식당", "소리 없는 집", "구름 위의 섬", "마지막 수업", "여우 사냥",
          "은하 철도", "봄날의 산책", "낡은 피아노", "거울 속의 나"]
# (word, its subject particle): 이 after a final consonant, 가 after a vowel
# (CG and OST are read 씨지, 오에스티).
ASPECTS = [("스토리", "가"), ("연기", "가"), ("음악", "이"), ("영상미", "가"), ("결말", "이"),
           ("대사", "가"), ("액션", "이"), ("연출", "이"), ("캐릭터", "가"), ("CG", "가"),
           ("OST", "가"), ("편집", "이")]
ROLES = ["주인공", "남주", "여주", "조연", "악역", "아역 배우", "감독"]

PHRASES = {
    1: ["{aspect} 정말 좋았어요", "{aspect} 최고였다", "{role} 연기 진짜 잘하네요",
        "시간 가는 줄 몰랐어요", "또 보고 싶은 영화", "강력 추천합니다",
        "마지막 장면에서 눈물이 났어요", "가족이랑 보기 좋은 영화예요", "인생 영화 등극",
        "{aspect} 완전 best", "기대 이상이었어요", "웃다가 울다가 했네요",
        "몇 번을 봐도 재밌다", "{role} 때문에 계속 웃었어요", "올해 본 영화 중에 제일 좋았음"],
    0: ["{aspect} 너무 별로였어요", "{aspect} 엉망이다", "{role} 연기가 너무 어색해요",
        "돈이 아깝다", "시간 낭비였음", "보다가 잠들었어요", "다시는 안 볼 듯",
        "기대했는데 실망했어요", "결말이 너무 허무하다", "이건 진짜 worst",
        "평점 알바 너무 많네", "지루하고 뻔한 이야기", "{aspect} 유치해서 못 보겠다",
        "{role} 왜 나왔는지 모르겠음", "중간에 나가고 싶었다"],
}
OPENERS = {1: ["", "", "와 ", "진짜 ", "ㅋㅋㅋ ", "오랜만에 ", "솔직히 "],
           0: ["", "", "아 ", "하 ", "솔직히 ", "에휴 ", "진짜 "]}
ENDINGS = {1: ["", "", "!!", " ㅋㅋ", " ^^", "~", ". 10점 줍니다", " good"],
           0: ["", "", "...", " ㅡㅡ", " ㅠㅠ", ". 1점도 아까움", " 비추"]}
# Lines with no sentiment, so the corpus reads like a movie's page of comments.
REMARKS = ["주말에 친구랑 봤어요", "원작 소설을 먼저 읽었습니다", "극장에 사람이 많았다",
           "{title} 보고 왔습니다", "예고편 보고 기대했던 영화", "두 시간이 넘는 영화네요",
           "심야로 봤는데 자리가 꽉 찼음", "{title} 2편도 나온다던데", "부모님이랑 같이 봄",
           "OTT로 다시 봤어요"]


def make_review(rng: random.Random, label: int) -> str:
    """One review: an opener, one or two phrases of the label's sentiment, an ending;
    now and then without its spaces, as people type on phones."""
    count = 1 if rng.random() < 0.5 else 2
    parts = []
    for template in rng.sample(PHRASES[label], count):
        word, particle = rng.choice(ASPECTS)
        parts.append(template.format(aspect=word + particle, role=rng.choice(ROLES)))
    if rng.random() < 0.15:
        parts[-1] = parts[-1].replace(" ", "")
    return rng.choice(OPENERS[label]) + " ".join(parts) + rng.choice(ENDINGS[label])


def make_reviews(rng: random.Random, n: int, label: int, seen: Set[str]
                 ) -> List[Tuple[str, int]]:
    """`n` reviews with `label` (1 positive, 0 negative) not in `seen` (updated)."""
    rows = []
    while len(rows) < n:
        text = make_review(rng, label)
        if text not in seen:
            seen.add(text)
            rows.append((text, label))
    return rows


def make_corpus(rng: random.Random, seen: Set[str]) -> List[List[str]]:
    """One document per title: 8 to 14 lines, reviews of either sentiment and remarks."""
    docs = []
    for title in TITLES:
        lines = []
        for _ in range(rng.randint(8, 14)):
            if rng.random() < 0.25:
                lines.append(rng.choice(REMARKS).format(title=title))
            else:
                lines.append(make_reviews(rng, 1, rng.randint(0, 1), seen)[0][0])
        docs.append(lines)
    return docs


def make_ratings(rng: random.Random, seen: Set[str]) -> Dict[str, List[Tuple[str, int]]]:
    """train (200), dev (60) and test (60) rows, half of each positive, in random order;
    one empty review in train (labelled 0) and one in test (labelled 1), as NSMC has a few."""
    splits = {}
    for split, n, empty in (("train", 200, [("", 0)]), ("dev", 60, []),
                            ("test", 60, [("", 1)])):
        rows = list(empty)
        for label in (1, 0):
            rows += make_reviews(rng, n // 2 - sum(1 for _, l in empty if l == label),
                                 label, seen)
        rng.shuffle(rows)
        splits[split] = rows
    return splits


def render_files(seed: int = SEED) -> Dict[str, str]:
    """File name under demo/data/ -> exact file contents."""
    rng = random.Random(seed)
    seen: Set[str] = set()
    ratings = make_ratings(rng, seen)  # first, so the corpus repeats none of them
    corpus = make_corpus(rng, seen)
    files = {"korean/corpus.txt": "\n".join("".join(s + "\n" for s in doc) for doc in corpus)}
    ids = rng.sample(range(1_000_000, 10_000_000), sum(len(r) for r in ratings.values()))
    for split, rows in ratings.items():
        files[f"korean/ratings_{split}.txt"] = "id\tdocument\tlabel\n" + "".join(
            f"{ids.pop()}\t{text}\t{label}\n" for text, label in rows)
    return files
