// The reaction picker with search (fetched when "More reactions" is first
// used): 358 common emoji with their Unicode names, recent ones first, a
// search box that filters as one types; arrows move through the grid
// (aria-activedescendant), Enter chooses, Escape closes.

import { h, icon } from "./dom.js";
import { QUICK_REACTIONS } from "./room.js";

// one per line: the emoji, a space, its name (and other words to find it by)
const DATA = `😀 grinning face (smile grin)
😁 grinning face with smiling eyes
😂 face with tears of joy (laugh lol)
😃 smiling face with open mouth
😄 smiling face with open mouth and smiling eyes
😅 smiling face with open mouth and cold sweat (sweat nervous)
😆 smiling face with open mouth and tightly-closed eyes
😇 smiling face with halo
😈 smiling face with horns
😉 winking face (wink)
😊 smiling face with smiling eyes
😋 face savouring delicious food
😌 relieved face
😍 smiling face with heart-shaped eyes (love heart eyes)
😎 smiling face with sunglasses
😏 smirking face
😐 neutral face
😑 expressionless face
😒 unamused face
😓 face with cold sweat
😔 pensive face
😕 confused face
😖 confounded face
😗 kissing face
😘 face throwing a kiss
😙 kissing face with smiling eyes
😚 kissing face with closed eyes
😛 face with stuck-out tongue
😜 face with stuck-out tongue and winking eye
😝 face with stuck-out tongue and tightly-closed eyes
😞 disappointed face
😟 worried face
😠 angry face
😡 pouting face (angry mad)
😢 crying face (sad cry)
😣 persevering face
😤 face with look of triumph
😥 disappointed but relieved face
😦 frowning face with open mouth
😧 anguished face
😨 fearful face
😩 weary face
😪 sleepy face
😫 tired face
😬 grimacing face
😭 loudly crying face (sad cry sob)
😮 face with open mouth
😯 hushed face
😰 face with open mouth and cold sweat
😱 face screaming in fear
😲 astonished face
😳 flushed face
😴 sleeping face
😵 dizzy face
😶 face without mouth
😷 face with medical mask
🙁 slightly frowning face
🙂 slightly smiling face (smile)
🙃 upside-down face
🙄 face with rolling eyes
🤐 zipper-mouth face
🤑 money-mouth face
🤒 face with thermometer
🤓 nerd face
🤔 thinking face (think hmm)
🤕 face with head-bandage
🤖 robot face
🤗 hugging face
🤘 sign of the horns
🤙 call me hand
🤚 raised back of hand
🤛 left-facing fist
🤜 right-facing fist
🤝 handshake
🤞 hand with index and middle fingers crossed
🤟 i love you hand
🤠 face with cowboy hat
🤡 clown face
🤢 nauseated face
🤣 rolling on the floor laughing (laugh lol rofl)
🤤 drooling face
🤥 lying face
🤦 face palm (facepalm)
🤧 sneezing face
🤨 face with one eyebrow raised
🤩 grinning face with star eyes
🤪 grinning face with one large and one small eye
🤫 face with finger covering closed lips
🤬 serious face with symbols covering mouth
🤭 smiling face with smiling eyes and hand covering mouth
🤮 face with open mouth vomiting
🤯 shocked face with exploding head (mind blown)
🥰 smiling face with smiling eyes and three hearts
🥱 yawning face
🥲 smiling face with tear
🥳 face with party horn and party hat (party)
🥴 face with uneven eyes and wavy mouth
🥵 overheated face
🥶 freezing face
🥺 face with pleading eyes
🧐 face with monocle
👍 thumbs up (+1 yes like)
👎 thumbs down (-1 no dislike)
👌 ok hand (ok okay)
👏 clapping hands (clap applause)
🙌 person raising both hands in celebration
🙏 person with folded hands (thanks please pray)
👋 waving hand (wave hello hi bye)
👊 fisted hand
✊ raised fist
✋ raised hand
✌️ victory hand
👆 white up pointing backhand index
👇 white down pointing backhand index
👈 white left pointing backhand index
👉 white right pointing backhand index
☝️ white up pointing index
💪 flexed biceps
👐 open hands
❤️ heavy black heart (heart love)
🧡 orange heart
💛 yellow heart
💚 green heart
💙 blue heart
💜 purple heart
🖤 black heart
🤍 white heart
🤎 brown heart
💔 broken heart
💕 two hearts
💖 sparkling heart
💗 growing heart
💘 heart with arrow
💝 heart with ribbon
💞 revolving hearts
🤷 shrug (shrug)
🙋 happy person raising one hand
🙆 face with ok gesture
🙅 face with no good gesture
🙇 person bowing deeply
💃 dancer
🕺 man dancing
👀 eyes (eyes look)
🧠 brain
✅ white heavy check mark (done yes check)
❌ cross mark (no cross wrong)
❓ black question mark ornament
❗ heavy exclamation mark symbol
💯 hundred points symbol (hundred)
🔥 fire (fire lit)
✨ sparkles
⭐ white medium star
🌟 glowing star
💥 collision symbol
💤 sleeping symbol
💩 pile of poo (poop)
🎉 party popper (tada party celebrate)
🎊 confetti ball
🎁 wrapped present
🏆 trophy
🥇 first place medal
🚀 rocket (rocket ship launch)
💡 electric light bulb
📌 pushpin
🔒 lock
🔓 open lock
🔔 bell
🔕 bell with cancellation stroke
⏰ alarm clock
⌛ hourglass
⏳ hourglass with flowing sand
📈 chart with upwards trend
📉 chart with downwards trend
📊 bar chart
📝 memo
📣 cheering megaphone
📢 public address loudspeaker
🔍 left-pointing magnifying glass
🚧 construction
⚠️ warning
🚫 no entry
🛑 octagonal
✔️ heavy check mark
✖️ heavy multiplication x
➕ heavy plus
➖ heavy minus
➡️ black rightwards arrow
⬆️ upwards black arrow
⬇️ downwards black arrow
🆕 squared new
🆗 squared ok
🆙 squared up with exclamation mark
⚡ high voltage
💬 speech balloon
💭 thought balloon
🎯 direct hit
🐶 dog face
🐱 cat face
🐭 mouse face
🐹 hamster face
🐰 rabbit face
🦊 fox face
🐻 bear face
🐼 panda face
🐨 koala
🐯 tiger face
🦁 lion face
🐮 cow face
🐷 pig face
🐸 frog face
🐵 monkey face
🙈 see-no-evil monkey
🙉 hear-no-evil monkey
🙊 speak-no-evil monkey
🐔 chicken
🐧 penguin
🐦 bird
🐤 baby chick
🦆 duck
🦅 eagle
🦉 owl
🦇 bat
🐺 wolf face
🐴 horse face
🦄 unicorn face
🐝 honeybee
🐛 bug
🦋 butterfly
🐌 snail
🐞 lady beetle
🐢 turtle
🐍 snake
🐙 octopus
🦀 crab
🐠 tropical fish
🐬 dolphin
🐳 spouting whale
🦈 shark
🍎 red apple
🍐 pear
🍊 tangerine
🍋 lemon
🍌 banana
🍉 watermelon
🍇 grapes
🍓 strawberry
🍒 cherries
🍑 peach
🍍 pineapple
🥥 coconut
🥑 avocado
🍆 aubergine
🥕 carrot
🌽 ear of maize
🌶 hot pepper
🥦 broccoli
🍄 mushroom
🍞 bread
🧀 cheese wedge
🍕 slice of pizza
🍔 hamburger
🍟 french fries
🌭 hot dog
🌮 taco
🍣 sushi
🍜 steaming bowl
🍰 shortcake
🎂 birthday cake
🍩 doughnut
🍪 cookie
🍫 chocolate bar
🍬 candy
🍿 popcorn
☕ hot beverage (coffee)
🍵 teacup without handle
🍺 beer mug (beer)
🍻 clinking beer mugs
🍷 wine glass
🍸 cocktail glass
🥂 clinking glasses
☀️ black sun with rays
⛅ sun behind cloud
🌧 cloud with rain
⛈️ thunder cloud and rain
❄️ snowflake
☃️ snowman
🌈 rainbow
🌊 water wave
🌍 earth globe europe-africa
🌙 crescent moon
🌻 sunflower
🌹 rose
🌷 tulip
🌲 evergreen tree
🌵 cactus
🍀 four leaf clover
🍁 maple leaf
🌱 seedling
⚽ soccer ball
🏀 basketball and hoop
🏈 american football
⚾ baseball
🎾 tennis racquet and ball
🏐 volleyball
🎱 billiards
🎮 video game
🎲 game die
🎵 musical note
🎶 multiple musical notes
🎤 microphone
🎧 headphone
🎸 guitar
🎹 musical keyboard
🎨 artist palette
🎬 clapper board
💻 personal computer
🖥 desktop computer
⌨️ keyboard
📱 mobile phone
📷 camera
📺 television
📚 books
📖 open book
📦 package
📧 e-mail symbol
📅 calendar
📋 clipboard
📎 paperclip
✂️ black scissors
🔧 wrench
🔨 hammer
⚙️ gear
🛠 hammer and wrench
🧪 test tube
🔬 microscope
🔭 telescope
💰 money bag
💸 money with wings
💎 gem stone
🏠 house building
🏢 office building
🚗 automobile
🚌 bus
🚲 bicycle
✈️ airplane
🚁 helicopter
🚢 ship
🚨 police cars revolving light
🚿 shower
🔑 key
🗑 wastebasket
📥 inbox tray
📤 outbox tray
🔗 link symbol
🧰 toolbox
🧹 broom
🧾 receipt
📰 newspaper`;

const ALL = DATA.split("\n").map((line) => {
  const at = line.indexOf(" ");
  return { emoji: line.slice(0, at), name: line.slice(at + 1).replace(/ \(.*\)$/, ""), words: line.slice(at + 1) };
});
const COLUMNS = 8;
const RECENT_MAX = 16;

class Picker {
  constructor(app) {
    this.app = app;
    this.shown = [];
    this.active = 0;
    this.search = h("input", {
      id: "emoji-search",
      type: "search",
      role: "combobox",
      autocomplete: "off",
      spellcheck: "false",
      "aria-expanded": "true",
      "aria-controls": "emoji-list",
      "aria-autocomplete": "list",
      on: { input: () => this.render(), keydown: (event) => this.onKey(event) },
    });
    this.list = h("div", { id: "emoji-list", class: "emoji-grid", role: "listbox", "aria-label": "Reactions" });
    this.status = h("p", { class: "hint", role: "status" });
    this.dialog = h(
      "dialog",
      { class: "dialog emoji-dialog", "aria-labelledby": "emoji-title", on: { close: () => this.closed() } },
      h(
        "header",
        { class: "dialog-head" },
        h("h2", { id: "emoji-title", text: "Add a reaction" }),
        h("button", { type: "button", class: "icon-button", "aria-label": "Close reactions", on: { click: () => this.dialog.close() } }, icon("close")),
      ),
      h("label", { for: "emoji-search", text: "Search reactions" }),
      this.search,
      this.status,
      this.list,
    );
    document.body.append(this.dialog);
  }

  get key() {
    return `mesh.emoji.${this.app.store.me.participantId}`;
  }

  recent() {
    try {
      return JSON.parse(localStorage.getItem(this.key)) || [];
    } catch {
      return [];
    }
  }

  open(timeline, message) {
    this.timeline = timeline;
    this.message = message;
    this.search.value = "";
    this.render();
    this.dialog.showModal();
    this.search.focus();
  }

  /** Recent ones first, then the quick ones, then the rest; filtered by
   * every word typed. */
  render() {
    const words = this.search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const first = [...this.recent(), ...QUICK_REACTIONS];
    const order = [...new Set([...first, ...ALL.map((e) => e.emoji)])];
    const entries = new Map(ALL.map((e) => [e.emoji, e]));
    this.shown = order
      .map((emoji) => entries.get(emoji) || { emoji, name: emoji, words: emoji })
      .filter((e) => words.every((w) => e.words.includes(w)));
    this.active = 0;
    this.status.textContent = words.length ? `${this.shown.length} found` : "";
    this.list.replaceChildren(
      ...this.shown.map((e, i) =>
        h("span", {
          id: `emoji-${i}`,
          role: "option",
          class: "emoji-option",
          "aria-label": e.name,
          title: e.name,
          "aria-selected": "false",
          text: e.emoji,
          on: {
            mousedown: (event) => event.preventDefault(),
            click: () => this.choose(e.emoji),
          },
        }),
      ),
    );
    this.highlight();
  }

  highlight() {
    for (const el of this.list.querySelectorAll("[aria-selected=true]")) el.setAttribute("aria-selected", "false");
    const el = this.list.children[this.active];
    if (!el) return this.search.removeAttribute("aria-activedescendant");
    el.setAttribute("aria-selected", "true");
    this.search.setAttribute("aria-activedescendant", el.id);
    el.scrollIntoView({ block: "nearest" });
  }

  onKey(event) {
    const steps = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: COLUMNS, ArrowUp: -COLUMNS };
    if (event.key in steps && this.shown.length) {
      event.preventDefault();
      this.active = Math.max(0, Math.min(this.shown.length - 1, this.active + steps[event.key]));
      this.highlight();
    } else if (event.key === "Escape") {
      event.preventDefault(); // (a search field would only clear itself)
      this.dialog.close();
    } else if (event.key === "Enter") {
      event.preventDefault();
      if (this.shown[this.active]) this.choose(this.shown[this.active].emoji);
    }
  }

  choose(emoji) {
    const recent = [emoji, ...this.recent().filter((e) => e !== emoji)].slice(0, RECENT_MAX);
    try {
      localStorage.setItem(this.key, JSON.stringify(recent));
    } catch {
      // (kept for this time only)
    }
    this.chosen = true;
    this.app.toggleReaction(this.message, emoji, true);
    this.dialog.close();
  }

  /** Back to the message's "Add reaction", the quick picker closed. */
  closed() {
    const { timeline, message } = this;
    timeline.picking = null;
    const current = (timeline.room && timeline.room.find(message.messageId)) || message;
    if (timeline.views.has(message.messageId)) timeline.upsert(current);
    timeline.focusAction(message.messageId, "Add reaction");
  }
}

/** Open the picker for *message* of *timeline*. */
export function openEmoji(app, timeline, message) {
  app.emojiPicker ||= new Picker(app);
  app.emojiPicker.open(timeline, message);
}
