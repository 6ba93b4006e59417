/* pages.c: a heap's pages of small blocks, and its medium blocks. Each
 * class has a current page, which the bins refill from, and a list of the
 * other pages with free blocks (available); a block freed back to its page
 * (by a bin's flush, or taken from its remote list) may list the page
 * again or, the page emptied, give it back to its segment. Medium blocks
 * (layout.h, CLASS_MEDIUM) are pages of their own, taken from the heap's
 * segments and given back to them. All of it is touched by the owner, or
 * by the purger thread collecting an idle owner's remote frees, under the
 * heap's lock (bins.c): every function here runs with it held.
 * Invariants (heap_check): a page in use is its class's current page, or
 * listed on its class's available list with a free block, or full: no free
 * block and every block carved; its free list holds capacity - used
 * blocks; a page whose last block comes back is released, unless current. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "block_guards.h"
#include "heap_private.h"

static void list_push(struct heap *heap, struct page *page)
{
    strata_assert(!page->listed && page->in_use && page->free != NULL);
    struct page **head = &heap->available[page->class_index];
    page->prev = NULL;
    page->next = *head;
    if (*head)
        (*head)->prev = page;
    *head = page;
    page->listed = 1;
}

/* An emptied page goes back to its segment, and the purge policy runs. */
static STRATA_NOINLINE void page_give_back(struct heap *heap, struct page *page)
{
    page_release(heap, page);
    heap_maybe_purge(heap);
}

/* Where a page goes once blocks came back to its free list: emptied, back
 * to its segment, or, as its class's current page, started again from its
 * first block; else onto its class's list if it was off it (full). */
static void page_blocks_back(struct heap *heap, struct page *page)
{
    if (page == heap->current[page->class_index]) {
        if (page->used == 0 && !strata_options.check)
            page_restart(page);
        return;
    }
    if (page->used == 0) {
        if (page->listed)
            list_remove(heap, page);
        page_give_back(heap, page);
    } else if (!page->listed) {
        list_push(heap, page);
    }
}

/* A chain of `count` small blocks of the page, first..last, linked (last's
 * link is rewritten), joins its free list. */
static inline void page_splice_free(struct heap *heap, struct page *page, struct block *first, struct block *last,
                                    uint32_t count)
{
    strata_assert_cmp(page->used, >=, count);
    struct block *head = page->free;
    if (unlikely(head == first))
        report_fatal("double free", first);
    block_set_next(last, head);
    page->free = first;
    counter_set(&page->used, page->used - count); /* the caller accounts the bytes (counters_bytes_out), in batches */
    if (likely(head != NULL && page->used != 0))
        return;
    page_blocks_back(heap, page);
}

void page_free_block(struct heap *heap, struct page *page, struct block *block)
{
    if (unlikely(!page->in_use))
        report_fatal("free of a block that is not allocated", block);
    if (unlikely(page->class_index == CLASS_MEDIUM)) { /* its one block */
        strata_assert_cmp(page->used, ==, 1);
        counter_set(&page->used, 0);
        page_give_back(heap, page);
        return;
    }
    page_splice_free(heap, page, block, block, 1);
}

void page_free_run(struct heap *heap, struct page *page, struct block *first, struct block *last, uint32_t count)
{
    if (unlikely(!page->in_use || page->class_index == CLASS_MEDIUM || count > page->used))
        report_fatal("double free (more blocks came back to a page than it handed out)", first);
    page_splice_free(heap, page, first, last, count);
}

void page_take_remote(struct heap *heap, struct page *page, struct block *list, struct block *tail, uint32_t count)
{
    /* A block freed twice by other threads may be counted twice: the count
     * can then outrun the blocks handed out (the lists' check words stop
     * such a block when it is handed out a second time). */
    if (unlikely(count > page->used || !page->in_use))
        report_fatal("double free (more blocks came back to a page than it handed out)", list);
    if (page->class_index == CLASS_MEDIUM) { /* its one block */
        page_free_block(heap, page, list);
        return;
    }
    /* The oldest block is written here: it must still be as its free left
     * it, the end of the list. Freed again meanwhile by the owner (into a
     * bin, or handed out from there), it would be laundered into a free
     * block while in use. */
    if (unlikely(block_next(tail) != NULL))
        report_fatal("double free (a block freed by another thread was freed again)", tail);
    block_set_next(tail, page->free);
    page->free = list;
    counter_set(&page->used, page->used - count);
    page_blocks_back(heap, page);
}

/* An adopted segment's pages join the heap: each with free blocks (carved
 * further if need be) on its class's list, the full ones where they are. A
 * walk of its free lists, once per adoption. */
static void heap_adopt_pages(struct heap *heap, struct segment *segment)
{
    for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
        struct page *page = &segment->pages[i];
        if (!page->in_use)
            continue;
        strata_assert(!page->listed && page->used > 0);
        if (page->free == NULL)
            page_extend(page);
        if (page->free != NULL)
            list_push(heap, page);
    }
}

/* A page of the class for current[class] (heap lock held): from the heap's
 * free slices, then from segments of exited threads, adopted, and only then
 * from a new segment. NULL when a listed page (of an adopted segment) is to
 * be used instead, or when no memory is to be had. */
static struct page *page_for_class(struct heap *heap, unsigned class_index)
{
    struct page *page = page_new(heap, class_index, false);
    while (page == NULL) {
        struct segment *adopted = abandoned_adopt(heap);
        if (adopted == NULL)
            return page_new(heap, class_index, true);
        heap_adopt_pages(heap, adopted);
        if (heap->available[class_index] != NULL)
            return NULL;
        page = page_new(heap, class_index, false);
    }
    return page;
}

/* ---- pages written whole --------------------------------------------------
 * A carve of blocks over an OS page populates their head pages only
 * (segment.c, carve_populate): the pages between heads are the program's
 * to touch, and a program that allocates buffers and uses a part of each
 * would hold them resident for nothing. A program that writes its blocks
 * whole takes a trap at each of those pages instead, 10.5 us each in this
 * virtual machine. Each heap learns which its classes' blocks are: a new
 * page carved heads-only is a probe, looked at when it is spent (every
 * block carved and handed out): when at least DENSE_EIGHTHS eighths of its
 * carved OS pages are resident (the heads' and what the program wrote), the
 * class's next new pages make each carve's blocks resident whole, one call
 * a carve, and every DENSITY_PROBE_EVERY-th is carved heads-only again and
 * looked at, so that a program that stops writing its blocks whole is
 * followed. Not under a memory limit (a page charges what it carves) nor
 * in the secure flavour (its carves are zeroed, so populated, whole); a
 * page whose slices came resident has nothing to learn from or to
 * populate. */
#define DENSE_EIGHTHS 7
#define DENSITY_PROBE_EVERY 8

/* A new page of the class, before its first carve: its carves to populate
 * their blocks whole, or heads only (the class's probe). */
static void new_page_populate(struct heap *heap, struct page *page, unsigned class_index)
{
    if (class_size[class_index] <= os_page_size() || secure_has(SECURE_ZERO) || os_limited() ||
        page->touched == PAGE_TOUCHED_ALL)
        return;
    if (heap->populate_whole[class_index] && ++heap->pages_since_probe[class_index] < DENSITY_PROBE_EVERY) {
        page->populate_whole = 1;
        return;
    }
    heap->pages_since_probe[class_index] = 0;
    heap->touch_probe[class_index] = page;
}

void heap_page_spent(struct heap *heap, struct page *page)
{
    unsigned c = page->class_index;
    if (c >= CLASS_COUNT || heap->touch_probe[c] != page)
        return;
    heap->touch_probe[c] = NULL;
    if (page->touched == PAGE_TOUCHED_ALL || page->capacity != page->reserved)
        return;
    size_t pages = (size_t)page->capacity * page->block_size / os_page_size();
    if (pages > OS_RESIDENT_MAX_PAGES)
        pages = OS_RESIDENT_MAX_PAGES;
    char *blocks = (char *)((uintptr_t)page_blocks(page) & ~(uintptr_t)(os_page_size() - 1));
    size_t resident = os_resident_pages(blocks, pages * os_page_size());
    if (resident != SIZE_MAX)
        heap->populate_whole[c] = resident * 8 >= pages * DENSE_EIGHTHS;
}

struct page *heap_page_new_carved(struct heap *heap, unsigned class_index)
{
    heap_maybe_purge(heap);
    struct page *page = page_for_class(heap, class_index);
    if (page != NULL)
        new_page_populate(heap, page, class_index);
    /* A new page's first blocks: none at the memory limit, where the page
     * goes back. */
    if (page != NULL && !page_extend(page)) {
        page_release(heap, page);
        page = NULL;
    }
    strata_assert(page == NULL || (page->class_index == class_index && page->free != NULL && !page->listed));
    return page;
}

/* ---- medium blocks (layout.h, CLASS_MEDIUM) ------------------------------ */
/* A medium block's pages are left to the program's first touches, a trap
 * each (10.5 us in this virtual machine), but where it is about to be
 * written whole: zeroed by calloc, copied into by realloc, or grown by it
 * (which a program does to write it, as large.c has it for a large block's
 * growth). Those pages not yet touched are made resident in one call (1.1
 * us a page for 64 KiB): the same memory, sooner. */
static void medium_populate(char *from, size_t bytes)
{
    if (bytes != 0)
        os_populate(from, bytes);
}

void *heap_medium_alloc(struct heap *heap, size_t size, bool zero)
{
    os_lock_take(&heap->lock);
    heap_maybe_purge(heap);
    struct page *page = page_new_medium(heap, size);
    char *from = NULL;
    size_t untouched = page != NULL && zero ? page_medium_claim(page, size, &from) : 0;
    os_lock_give(&heap->lock);
    if (page == NULL)
        return NULL;
    counters_bytes_out((long)page->block_size);
    /* The slices may hold an old block's free-block words (resident ones, or
     * purged ones whose purge failed), which a free would take for a double
     * free: they are cleared as block_take clears a small block's, and a
     * zeroed block is always written. */
    char *block = medium_block(page);
    if (zero) {
        medium_populate(from, untouched);
        memset(block, 0, size);
    } else {
        block_take((struct block *)block);
    }
    return block;
}

void heap_medium_populate(void *block, size_t length)
{
    struct heap *heap = thread_heap;
    struct page *page = page_of(segment_of(block), block);
    strata_assert(page->class_index == CLASS_MEDIUM && medium_block(page) == block);
    char *from;
    os_lock_take(&heap->lock);
    size_t untouched = page_medium_claim(page, length, &from);
    os_lock_give(&heap->lock);
    medium_populate(from, untouched);
}

bool heap_medium_grow(void *block, size_t size)
{
    struct heap *heap = thread_heap;
    struct segment *segment = segment_of(block);
    struct page *page = page_of(segment, block);
    if (atomic_load_explicit(&segment->owner, memory_order_relaxed) != heap->owner_word ||
        page->class_index != CLASS_MEDIUM || size > MEDIUM_MAX)
        return false;
    size_t old_size = page->block_size;
    char *from = NULL;
    size_t untouched = 0;
    os_lock_take(&heap->lock);
    bool grown = page_grow_medium(heap, page, size);
    if (grown)
        untouched = page_medium_claim(page, page->block_size, &from);
    os_lock_give(&heap->lock);
    if (grown) {
        counters_bytes_out((long)page->block_size - (long)old_size);
        medium_populate(from, untouched);
    }
    return grown;
}

/* ---- the checkers' shared parts (heap_check.c, bins.c) ---------------------- */
static STRATA_TLS char broken_line[224];

const char *heap_broken(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(broken_line, sizeof broken_line, format, args);
    va_end(args);
    return broken_line;
}

/* The length of a free list, up to bound + 1; *broken names a block whose
 * words are not a free block's (the walk stops there). */
size_t free_list_length(const struct block *block, size_t bound, const struct block **broken)
{
    size_t n = 0;
    *broken = NULL;
    for (; block != NULL && n <= bound; block = block_link(block)) {
        if (!block_is_free(block)) {
            *broken = block;
            break;
        }
        n++;
    }
    return n;
}

bool page_contains(const struct page *page, const void *p)
{
    size_t offset = (size_t)((const char *)p - page_blocks(page));
    return (const char *)p >= page_blocks(page) && offset % page->block_size == 0 &&
           offset / page->block_size < page->capacity;
}

/* The secure flavour: a free block's state says it is free (layout.h). */
const char *free_block_state_check(const struct block *b, size_t slot)
{
    if (STRATA_SECURE_BUILD && *block_state(b, slot) != 0)
        return heap_broken("free block %p has the state %u of a block handed out", (const void *)b,
                           *block_state(b, slot));
    return NULL;
}

/* One page's counts and free list. */
const char *page_check(const struct page *page)
{
    const char *broken;
    if (page->used > page->capacity || page->capacity > page->reserved)
        return heap_broken("page %p: used %u, capacity %u, reserved %u", (const void *)page, page->used,
                           page->capacity, page->reserved);
    /* Pages written whole: only blocks over an OS page, in the default
     * flavour's pages (the secure flavour's carves populate whole anyway). */
    if (page->populate_whole && (page->class_index >= CLASS_COUNT || page->block_size <= os_page_size() ||
                                 secure_has(SECURE_ZERO)))
        return heap_broken("page %p: populated whole, with blocks of %u bytes", (const void *)page,
                           page->block_size);
    if (page->class_index == CLASS_MEDIUM && page->used != 0 && (broken = medium_guards_broken(page)) != NULL)
        return heap_broken("medium block %p: %s", (const void *)medium_block(page), broken);
    const struct block *bad;
    size_t length = free_list_length(page->free, page->capacity, &bad);
    if (bad != NULL)
        return heap_broken("page %p: free list holds %p, whose words are not a free block's (written after free?)",
                           (const void *)page, (const void *)bad);
    if (length != page->capacity - page->used)
        return heap_broken("page %p: free list of %zu%s blocks, capacity - used is %u",
                           (const void *)page, length, length > page->capacity ? "+" : "",
                           page->capacity - page->used);
    for (const struct block *b = page->free; b != NULL; b = block_link(b)) {
        if (!page_contains(page, b))
            return heap_broken("page %p: free list holds %p, not one of its carved blocks",
                               (const void *)page, (const void *)b);
        if ((broken = free_block_state_check(b, page->block_size)) != NULL)
            return broken;
    }
    return NULL;
}
