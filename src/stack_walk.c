/* stack_walk.c: the heap profiler's call stacks (stack_walk.h).
 * libgcc's unwinder, which a sample used at first, finds each frame's
 * unwind table entry, parses its CIE and FDE and runs their call-frame
 * program for every frame of every sample: about 10% of the threads
 * table's time profiled at 512 KiB. A frame's rule for finding its
 * caller depends only on the return address into it, so this walk finds
 * that rule once (the same tables, the same program, x86-64's registers)
 * and keeps it in a cache of return addresses; every later sample
 * through that address costs a hash probe and two loads.
 * A rule is: the frame's CFA (its caller's stack pointer) as rsp or rbp
 * plus an offset; the return address at CFA - 8; rbp unchanged or saved
 * at CFA plus an offset. Any other rule (a signal frame, a rule by DWARF
 * expression, a register saved in another register) makes the walk give
 * up, and the caller asks libgcc, which follows them all. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "platform.h"
#include "stack_walk.h"

/* DWARF register numbers of x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

/* A frame's rule for its caller's registers. */
struct frame_rule {
    int cfa_register;   /* REG_RSP or REG_RBP */
    int64_t cfa_offset; /* CFA = register + offset */
    int64_t rbp_offset; /* rbp saved at CFA + this; 0: unchanged */
    bool ra_undefined;  /* no caller: the outermost frame */
};

/* ---- reading the tables ---------------------------------------------------- */
struct reader {
    const uint8_t *at, *end;
    bool bad;
};

static uint64_t read_uleb(struct reader *r)
{
    uint64_t value = 0;
    for (unsigned shift = 0; r->at < r->end && shift < 64; shift += 7) {
        uint8_t byte = *r->at++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80))
            return value;
    }
    r->bad = true;
    return 0;
}

static int64_t read_sleb(struct reader *r)
{
    int64_t value = 0;
    unsigned shift = 0;
    uint8_t byte = 0x80;
    while (r->at < r->end && shift < 64 && (byte & 0x80)) {
        byte = *r->at++;
        value |= (int64_t)((uint64_t)(byte & 0x7f) << shift);
        shift += 7;
    }
    if (byte & 0x80) {
        r->bad = true;
        return 0;
    }
    if (shift < 64 && (byte & 0x40))
        value |= -(int64_t)((uint64_t)1 << shift);
    return value;
}

static uint64_t read_fixed(struct reader *r, size_t bytes)
{
    if ((size_t)(r->end - r->at) < bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t value = 0;
    memcpy(&value, r->at, bytes); /* little-endian */
    r->at += bytes;
    return value;
}

/* DW_EH_PE pointer encodings. */
#define PE_OMIT 0xff
#define PE_ABSPTR 0x00
#define PE_ULEB128 0x01
#define PE_UDATA2 0x02
#define PE_UDATA4 0x03
#define PE_UDATA8 0x04
#define PE_SLEB128 0x09
#define PE_SDATA2 0x0a
#define PE_SDATA4 0x0b
#define PE_SDATA8 0x0c
#define PE_PCREL 0x10
#define PE_DATAREL 0x30
#define PE_INDIRECT 0x80

/* A pointer in `encoding`; `datarel` the base for data-relative ones. */
static uintptr_t read_encoded(struct reader *r, uint8_t encoding, uintptr_t datarel)
{
    uintptr_t place = (uintptr_t)r->at, value;
    switch (encoding & 0x0f) {
    case PE_ABSPTR:
    case PE_UDATA8:
    case PE_SDATA8:
        value = (uintptr_t)read_fixed(r, 8);
        break;
    case PE_ULEB128:
        value = (uintptr_t)read_uleb(r);
        break;
    case PE_SLEB128:
        value = (uintptr_t)read_sleb(r);
        break;
    case PE_UDATA2:
        value = (uintptr_t)read_fixed(r, 2);
        break;
    case PE_SDATA2:
        value = (uintptr_t)(int64_t)(int16_t)read_fixed(r, 2);
        break;
    case PE_UDATA4:
        value = (uintptr_t)read_fixed(r, 4);
        break;
    case PE_SDATA4:
        value = (uintptr_t)(int64_t)(int32_t)read_fixed(r, 4);
        break;
    default:
        r->bad = true;
        return 0;
    }
    switch (encoding & 0x70) {
    case 0:
        break;
    case PE_PCREL:
        value += place;
        break;
    case PE_DATAREL:
        value += datarel;
        break;
    default:
        r->bad = true;
        return 0;
    }
    if (encoding & PE_INDIRECT)
        r->bad = true; /* not in an FDE's own fields */
    return value;
}

/* The FDE covering pc in the .eh_frame_hdr at `header` (binary search of
 * its sorted table); NULL if none. */
static const uint8_t *find_fde(const uint8_t *header, uintptr_t pc)
{
    if (header[0] != 1)
        return NULL;
    uint8_t frame_encoding = header[1], count_encoding = header[2], table_encoding = header[3];
    /* The table must be datarel sdata4 (what ld writes) to be searched. */
    if (table_encoding != (PE_DATAREL | PE_SDATA4) || count_encoding == PE_OMIT)
        return NULL;
    struct reader r = {header + 4, header + 4 + 16, false};
    read_encoded(&r, frame_encoding, (uintptr_t)header);
    uint64_t count = read_encoded(&r, count_encoding, (uintptr_t)header);
    if (r.bad || count == 0)
        return NULL;
    const int32_t *table = (const int32_t *)(const void *)r.at;
    uint64_t low = 0, high = count;
    while (high - low > 1) { /* the last entry starting at or below pc */
        uint64_t middle = (low + high) / 2;
        if ((uintptr_t)header + (intptr_t)table[2 * middle] <= pc)
            low = middle;
        else
            high = middle;
    }
    if ((uintptr_t)header + (intptr_t)table[2 * low] > pc)
        return NULL;
    return (const uint8_t *)header + table[2 * low + 1];
}

/* ---- the call-frame program -------------------------------------------------- */
struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_encoding;
    bool has_augmentation_data;
    const uint8_t *instructions, *end;
};

static bool parse_cie(const uint8_t *at, struct cie *cie)
{
    uint32_t length;
    memcpy(&length, at, 4);
    if (length == 0 || length == 0xffffffffu)
        return false;
    struct reader r = {at + 4, at + 4 + length, false};
    if (read_fixed(&r, 4) != 0) /* a CIE's id */
        return false;
    uint8_t version = (uint8_t)read_fixed(&r, 1);
    const char *augmentation = (const char *)r.at;
    size_t augmentation_length = strnlen(augmentation, (size_t)(r.end - r.at));
    r.at += augmentation_length + 1;
    cie->code_align = read_uleb(&r);
    cie->data_align = read_sleb(&r);
    uint64_t ra_register = version == 1 ? read_fixed(&r, 1) : read_uleb(&r);
    cie->fde_encoding = PE_ABSPTR;
    cie->has_augmentation_data = augmentation[0] == 'z';
    if (ra_register != REG_RA || r.bad)
        return false;
    if (cie->has_augmentation_data) {
        uint64_t data_length = read_uleb(&r);
        const uint8_t *data_end = r.at + data_length;
        for (const char *a = augmentation + 1; *a != '\0' && !r.bad; a++) {
            if (*a == 'R') {
                cie->fde_encoding = (uint8_t)read_fixed(&r, 1);
            } else if (*a == 'P') {
                uint8_t encoding = (uint8_t)read_fixed(&r, 1);
                read_encoded(&r, encoding & 0x7f, 0);
            } else if (*a == 'L') {
                read_fixed(&r, 1);
            } else {
                return false; /* 'S' (a signal frame) or unknown */
            }
        }
        if (data_end > r.end)
            return false;
        r.at = data_end;
    } else if (augmentation[0] != '\0') {
        return false;
    }
    cie->instructions = r.at;
    cie->end = r.end;
    return !r.bad;
}

/* A row of the table the program builds: the CFA, and where rbp is. */
struct row {
    int cfa_register;
    int64_t cfa_offset;
    int64_t rbp_offset;
    bool ra_undefined;
};

#define STATE_DEPTH 8

/* Runs the instructions from `location` until past pc; false on what the
 * walk does not follow. `initial` is the CIE's row (for DW_CFA_restore). */
static bool run_program(struct reader *r, const struct cie *cie, uintptr_t location, uintptr_t pc,
                        struct row *row, const struct row *initial)
{
    struct row saved[STATE_DEPTH];
    int depth = 0;
    while (r->at < r->end && !r->bad) {
        uint8_t op = *r->at++;
        uint8_t low = op & 0x3f;
        uint64_t reg, advance = 0;
        int64_t offset;
        switch (op & 0xc0) {
        case 0x40: /* advance_loc */
            advance = low * cie->code_align;
            break;
        case 0x80: /* offset */
            offset = (int64_t)read_uleb(r) * cie->data_align;
            if (low == REG_RBP)
                row->rbp_offset = offset;
            else if (low == REG_RA && offset != -8)
                return false;
            continue;
        case 0xc0: /* restore */
            if (low == REG_RBP)
                row->rbp_offset = initial->rbp_offset;
            continue;
        default:
            switch (op) {
            case 0x00: /* nop */
                continue;
            case 0x01: /* set_loc */
                return false;
            case 0x02:
                advance = read_fixed(r, 1) * cie->code_align;
                break;
            case 0x03:
                advance = read_fixed(r, 2) * cie->code_align;
                break;
            case 0x04:
                advance = read_fixed(r, 4) * cie->code_align;
                break;
            case 0x05: /* offset_extended */
            case 0x11: /* offset_extended_sf */
                reg = read_uleb(r);
                offset = op == 0x05 ? (int64_t)read_uleb(r) * cie->data_align : read_sleb(r) * cie->data_align;
                if (reg == REG_RBP)
                    row->rbp_offset = offset;
                else if (reg == REG_RA && offset != -8)
                    return false;
                continue;
            case 0x06: /* restore_extended */
                if (read_uleb(r) == REG_RBP)
                    row->rbp_offset = initial->rbp_offset;
                continue;
            case 0x07: /* undefined */
                reg = read_uleb(r);
                if (reg == REG_RA)
                    row->ra_undefined = true;
                else if (reg == REG_RBP)
                    return false;
                continue;
            case 0x08: /* same_value */
                if (read_uleb(r) == REG_RBP)
                    row->rbp_offset = 0;
                continue;
            case 0x09: /* register */
                reg = read_uleb(r);
                read_uleb(r);
                if (reg == REG_RBP || reg == REG_RA)
                    return false;
                continue;
            case 0x0a: /* remember_state */
                if (depth == STATE_DEPTH)
                    return false;
                saved[depth++] = *row;
                continue;
            case 0x0b: /* restore_state */
                if (depth == 0)
                    return false;
                *row = saved[--depth];
                continue;
            case 0x0c: /* def_cfa */
                row->cfa_register = (int)read_uleb(r);
                row->cfa_offset = (int64_t)read_uleb(r);
                continue;
            case 0x12: /* def_cfa_sf */
                row->cfa_register = (int)read_uleb(r);
                row->cfa_offset = read_sleb(r) * cie->data_align;
                continue;
            case 0x0d: /* def_cfa_register */
                row->cfa_register = (int)read_uleb(r);
                continue;
            case 0x0e: /* def_cfa_offset */
                row->cfa_offset = (int64_t)read_uleb(r);
                continue;
            case 0x13: /* def_cfa_offset_sf */
                row->cfa_offset = read_sleb(r) * cie->data_align;
                continue;
            case 0x10: /* expression */
            case 0x16: /* val_expression */
                reg = read_uleb(r);
                r->at += read_uleb(r);
                if (reg == REG_RBP || reg == REG_RA)
                    return false;
                continue;
            case 0x14: /* val_offset */
                reg = read_uleb(r);
                read_uleb(r);
                if (reg == REG_RBP || reg == REG_RA)
                    return false;
                continue;
            case 0x15: /* val_offset_sf */
                reg = read_uleb(r);
                read_sleb(r);
                if (reg == REG_RBP || reg == REG_RA)
                    return false;
                continue;
            case 0x2e: /* GNU_args_size */
                read_uleb(r);
                continue;
            default: /* def_cfa_expression and anything else */
                return false;
            }
        }
        location += advance;
        if (location > pc)
            return true;
    }
    return !r->bad;
}

/* The rule at pc by the FDE's program (and its CIE's). */
static bool rule_of_fde(const uint8_t *fde, uintptr_t pc, struct frame_rule *rule)
{
    uint32_t length, cie_pointer;
    memcpy(&length, fde, 4);
    memcpy(&cie_pointer, fde + 4, 4);
    if (length == 0 || length == 0xffffffffu || cie_pointer == 0)
        return false;
    struct cie cie;
    if (!parse_cie(fde + 4 - cie_pointer, &cie))
        return false;
    struct reader r = {fde + 8, fde + 4 + length, false};
    uintptr_t start = read_encoded(&r, cie.fde_encoding, 0);
    uintptr_t range = read_encoded(&r, cie.fde_encoding & 0x0f, 0);
    if (r.bad || pc < start || pc - start >= range)
        return false;
    if (cie.has_augmentation_data)
        r.at += read_uleb(&r);
    struct row row = {REG_RSP, 8, 0, false};
    struct reader initial_program = {cie.instructions, cie.end, false};
    if (!run_program(&initial_program, &cie, start, UINTPTR_MAX, &row, &row))
        return false;
    struct row initial = row;
    if (!run_program(&r, &cie, start, pc, &row, &initial))
        return false;
    if (row.cfa_register != REG_RSP && row.cfa_register != REG_RBP)
        return false;
    *rule = (struct frame_rule){row.cfa_register, row.cfa_offset, row.rbp_offset, row.ra_undefined};
    return true;
}


enum rule_found { RULE_FOUND, RULE_NONE, RULE_NOT_FOLLOWED };

/* The rule for the frame whose code is at pc (a return address less one,
 * or the walk's own first address): RULE_NONE when no unwind table covers
 * pc (where libgcc's unwinder ends the stack too), RULE_NOT_FOLLOWED when
 * the walk does not follow the one there. */
static enum rule_found find_rule(uintptr_t pc, struct frame_rule *rule)
{
    struct dl_find_object object;
    if (_dl_find_object((void *)pc, &object) != 0 || object.dlfo_eh_frame == NULL)
        return RULE_NONE;
    const uint8_t *fde = find_fde(object.dlfo_eh_frame, pc);
    if (fde == NULL)
        return RULE_NONE;
    return rule_of_fde(fde, pc, rule) ? RULE_FOUND : RULE_NOT_FOLLOWED;
}

/* ---- the cache of rules ---------------------------------------------------- */
/* One word an entry: the return address above, the rule below (bit 0 set
 * in a valid entry; bit 1 rbp-based CFA; bit 2 the outermost frame; bits
 * 3-5 rbp's slot below the CFA in words, 0 unchanged; bits 6-16 the CFA's
 * offset in words). A rule that does not fit is found again at every
 * walk. Entries are written
 * whole, so a reader sees an old entry or a new one, and a probe of a
 * few slots stops at an empty one. */
#define RULE_BITS 17
#define RULE_CACHE_SLOTS 8192
#define RULE_PROBES 4
static _Atomic uint64_t rule_cache[RULE_CACHE_SLOTS];

static size_t cache_slot(uintptr_t pc)
{
    return (size_t)(((uint64_t)pc * 0x9e3779b97f4a7c15u) >> 51) & (RULE_CACHE_SLOTS - 1);
}

static bool cache_lookup(uintptr_t pc, struct frame_rule *rule)
{
    for (size_t i = 0, slot = cache_slot(pc); i < RULE_PROBES; i++, slot = (slot + 1) & (RULE_CACHE_SLOTS - 1)) {
        uint64_t entry = atomic_load_explicit(&rule_cache[slot], memory_order_relaxed);
        if (entry == 0)
            return false;
        if (entry >> RULE_BITS != (uint64_t)pc)
            continue;
        rule->cfa_register = (entry & 2) ? REG_RBP : REG_RSP;
        rule->ra_undefined = (entry & 4) != 0;
        rule->rbp_offset = -(int64_t)(((entry >> 3) & 7) * 8);
        rule->cfa_offset = (int64_t)(((entry >> 6) & 0x7ff) * 8);
        return true;
    }
    return false;
}

static void cache_store(uintptr_t pc, const struct frame_rule *rule)
{
    int64_t rbp_words = -rule->rbp_offset / 8, cfa_words = rule->cfa_offset / 8;
    if ((uint64_t)pc >> (64 - RULE_BITS) != 0 || rule->rbp_offset > 0 || rule->rbp_offset % 8 != 0 ||
        rbp_words > 7 || rule->cfa_offset < 0 || rule->cfa_offset % 8 != 0 || cfa_words > 0x7ff)
        return;
    uint64_t entry = (uint64_t)pc << RULE_BITS | (uint64_t)cfa_words << 6 | (uint64_t)rbp_words << 3 |
                     (rule->ra_undefined ? 4u : 0u) | (rule->cfa_register == REG_RBP ? 2u : 0u) | 1u;
    size_t slot = cache_slot(pc);
    for (size_t i = 0; i < RULE_PROBES; i++, slot = (slot + 1) & (RULE_CACHE_SLOTS - 1)) {
        uint64_t seen = atomic_load_explicit(&rule_cache[slot], memory_order_relaxed);
        if (seen == 0 && atomic_compare_exchange_strong(&rule_cache[slot], &seen, entry))
            return;
        if (seen >> RULE_BITS == (uint64_t)pc)
            return; /* another thread stored it */
    }
    /* The probe's slots are taken: the rule is found again next time. */
}

/* ---- the walk ------------------------------------------------------------- */
/* A walk that runs past this much stack has gone wrong: it stops. */
#define STACK_SPAN_MAX ((uintptr_t)256 << 20)

/* A word the walk read, noted for its caller (counted past the room,
 * which makes the record incomplete); its index. */
static inline int read_noted(struct stack_reads *reads, uintptr_t at, uintptr_t value)
{
    if (reads == NULL)
        return -1;
    if (reads->count < STACK_READS_MAX) {
        reads->at[reads->count] = at;
        reads->value[reads->count] = value;
    }
    return (int)reads->count++;
}

/* A noted read that turned out not to matter: a saved rbp that no frame's
 * CFA used before the next was restored (code built without frame
 * pointers keeps data there, different at every call). */
static inline void read_forgotten(struct stack_reads *reads, int index)
{
    if (reads == NULL || index < 0 || reads->count > STACK_READS_MAX)
        return; /* an incomplete record stays incomplete */
    /* The others keep their order (stack_reads_unchanged). */
    for (uint32_t i = (uint32_t)index; i + 1 < reads->count; i++) {
        reads->at[i] = reads->at[i + 1];
        reads->value[i] = reads->value[i + 1];
    }
    reads->count--;
}

int stack_walk_from(const struct stack_start *start, uintptr_t *frames, int max, uintptr_t skip_start,
                    uintptr_t skip_end, struct stack_reads *reads)
{
    if (reads != NULL) {
        reads->count = 0;
        reads->complete = false;
        reads->start_bp_used = false;
    }
#if defined(__x86_64__)
    if (start->pc == 0)
        return -1;
    uintptr_t pc = start->pc, sp = start->sp, bp = start->bp;
    uintptr_t lowest = sp;
    int depth = 0;
    bool first = true, bp_restored = false;
    int bp_read_unused = -1; /* the noted read of rbp's last restore, while no CFA used it */
    while (depth < max) {
        /* A return address is the instruction after the call: its rule is
         * the call's, one byte back. */
        uintptr_t at = first ? pc : pc - 1;
        struct frame_rule rule;
        if (!cache_lookup(at, &rule)) {
            enum rule_found found = find_rule(at, &rule);
            if (found == RULE_NONE && !first)
                break;
            if (found != RULE_FOUND)
                return -1;
            cache_store(at, &rule);
        }
        if (rule.ra_undefined)
            break;
        if (rule.cfa_register == REG_RBP) {
            if (!bp_restored && reads != NULL)
                reads->start_bp_used = true;
            bp_read_unused = -1;
        }
        uintptr_t cfa = (rule.cfa_register == REG_RSP ? sp : bp) + (uintptr_t)rule.cfa_offset;
        if (cfa <= sp || cfa - lowest > STACK_SPAN_MAX || (cfa & 7) != 0)
            return -1;
        uintptr_t caller = *(const uintptr_t *)(cfa - 8);
        read_noted(reads, cfa - 8, caller);
        if (rule.rbp_offset != 0) {
            bp = *(const uintptr_t *)(cfa + (uintptr_t)rule.rbp_offset);
            read_forgotten(reads, bp_read_unused);
            bp_read_unused = read_noted(reads, cfa + (uintptr_t)rule.rbp_offset, bp);
            bp_restored = true;
        }
        sp = cfa;
        pc = caller;
        if (pc == 0)
            break;
        if (depth > 0 || pc < skip_start || pc >= skip_end)
            frames[depth++] = pc;
        first = false;
    }
    read_forgotten(reads, bp_read_unused);
    if (reads != NULL) {
        reads->complete = reads->count <= STACK_READS_MAX;
        if (!reads->complete)
            reads->count = STACK_READS_MAX;
    }
    return depth;
#else
    (void)start;
    (void)frames;
    (void)max;
    (void)skip_start;
    (void)skip_end;
    return -1;
#endif
}

STRATA_NOINLINE int stack_walk(uintptr_t *frames, int max, uintptr_t skip_start, uintptr_t skip_end)
{
    /* The registers at one address of this function, whose own rule then
     * leads to its caller. */
    struct stack_start here;
    stack_start_here(&here);
    return stack_walk_from(&here, frames, max, skip_start, skip_end, NULL);
}
