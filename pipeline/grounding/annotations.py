"""Boxes from the dataset's own instance annotations, matched to a phrase's object (no weights needed).

The phrase's last word is its object noun, mapped to an annotation category (the synthetic world's shape
kinds exactly; COCO's 80 categories through a synonym table: man, woman, boy, child, people -> person; ...).
The other words filter instances by their annotated attributes when the dataset has them (the world's
``attributes: {colour, size}``); on COCO, which has none, every instance of the category is returned.
"""
from __future__ import annotations

from typing import Sequence

from .base import Box, GroundItem
from .instances import InstanceBoxes

_COCO = {
    "person": "person people man men woman women boy boys girl girls child children kid kids baby babies guy guys "
              "lady ladies player players skier skiers surfer surfers skateboarder skateboarders snowboarder "
              "rider riders adult adults teenager teen toddler gentleman crowd batter catcher pitcher umpire "
              "chef cook officer policeman soldier student students worker workers tourist tourists family "
              "couple friends fans spectators mother father son daughter brother sister individual someone",
    "bicycle": "bicycle bicycles bike bikes cycle", "car": "car cars vehicle vehicles sedan suv taxi cab",
    "motorcycle": "motorcycle motorcycles motorbike motorbikes scooter moped",
    "airplane": "airplane airplanes plane planes jet jets aircraft airliner", "bus": "bus buses",
    "train": "train trains locomotive railcar", "truck": "truck trucks pickup lorry",
    "boat": "boat boats ship ships canoe kayak sailboat yacht", "traffic light": "light lights signal",
    "fire hydrant": "hydrant hydrants", "stop sign": "sign signs", "parking meter": "meter meters",
    "bench": "bench benches", "bird": "bird birds pigeon pigeons seagull gull duck ducks parrot goose geese",
    "cat": "cat cats kitten kittens kitty", "dog": "dog dogs puppy puppies pup",
    "horse": "horse horses pony ponies foal", "sheep": "sheep lamb lambs", "cow": "cow cows cattle bull calf",
    "elephant": "elephant elephants", "bear": "bear bears", "zebra": "zebra zebras",
    "giraffe": "giraffe giraffes", "backpack": "backpack backpacks", "umbrella": "umbrella umbrellas parasol",
    "handbag": "handbag handbags purse bag", "tie": "tie ties necktie", "suitcase": "suitcase suitcases luggage",
    "frisbee": "frisbee frisbees disc", "skis": "skis ski", "snowboard": "snowboard snowboards",
    "sports ball": "ball balls football soccer baseball basketball", "kite": "kite kites",
    "baseball bat": "bat bats", "baseball glove": "glove gloves mitt", "skateboard": "skateboard skateboards",
    "surfboard": "surfboard surfboards board", "tennis racket": "racket rackets racquet",
    "bottle": "bottle bottles", "wine glass": "glass glasses", "cup": "cup cups mug mugs",
    "fork": "fork forks", "knife": "knife knives", "spoon": "spoon spoons", "bowl": "bowl bowls",
    "banana": "banana bananas", "apple": "apple apples", "sandwich": "sandwich sandwiches burger",
    "orange": "orange oranges", "broccoli": "broccoli", "carrot": "carrot carrots",
    "hot dog": "hotdog hotdogs", "pizza": "pizza pizzas", "donut": "donut donuts doughnut doughnuts",
    "cake": "cake cakes cupcake", "chair": "chair chairs stool", "couch": "couch couches sofa sofas",
    "potted plant": "plant plants", "bed": "bed beds", "dining table": "table tables desk",
    "toilet": "toilet toilets", "tv": "tv television monitor screen", "laptop": "laptop laptops computer",
    "mouse": "mouse", "remote": "remote remotes controller", "keyboard": "keyboard keyboards",
    "cell phone": "phone phones cellphone smartphone", "microwave": "microwave", "oven": "oven stove",
    "toaster": "toaster", "sink": "sink sinks", "refrigerator": "refrigerator fridge", "book": "book books",
    "clock": "clock clocks", "vase": "vase vases", "scissors": "scissors", "teddy bear": "teddy",
    "hair drier": "dryer drier", "toothbrush": "toothbrush toothbrushes",
}
COCO_SYNONYMS = {w: cat for cat, words in _COCO.items() for w in words.split()}
SIZE_WORDS = {"small": "small", "little": "small", "tiny": "small", "large": "large", "big": "large",
              "huge": "large"}


class AnnotationsGrounder:
    name = "annotations"
    needs_images = False

    def __init__(self, instances: InstanceBoxes | dict[int, list[dict]], synonyms: dict[str, str] | None = None):
        """``instances``: the columns (``read_instance_boxes``) or ``read_coco_instances``' rows by image."""
        if isinstance(instances, dict):
            instances = InstanceBoxes.from_mapping(instances)
        self.instances = instances
        self.synonyms = {**COCO_SYNONYMS, **(synonyms or {}), **{c: c for c in instances.categories()}}
        self.colours = instances.colours()

    def category(self, noun: str) -> str | None:
        noun = noun.lower()
        if noun in self.synonyms:
            return self.synonyms[noun]
        if noun.endswith("s") and noun[:-1] in self.synonyms:
            return self.synonyms[noun[:-1]]
        return None

    def match(self, image_id: int, phrase: str) -> list[Box]:
        words = phrase.lower().split()
        if not words:
            return []
        cat = self.category(words[-1])
        if cat is None:
            return []
        out = []
        for ann in self.instances.get(image_id, []):
            if ann["category"] != cat:
                continue
            attrs = ann.get("attributes") or {}
            ok = True
            for w in words[:-1]:
                if "colour" in attrs and w in self.colours:
                    ok &= attrs["colour"] == w
                elif "size" in attrs and w in SIZE_WORDS:
                    ok &= attrs["size"] == SIZE_WORDS[w]
            if ok:
                out.append(Box(tuple(float(v) for v in ann["box_xyxy"]), 1.0, ann["category"]))
        return out

    def ground(self, items: Sequence[GroundItem]) -> list[list[list[Box]]]:
        return [[self.match(it.image_id, p) for p in it.phrases] for it in items]

