/* segment.c: segments (SEGMENT_SIZE-aligned regions owned by one heap), the
 * process-wide segment map that tells a strata pointer from any other, and
 * pages carved from runs of free slices. Invariants: a slice is either in
 * free_mask or covered by exactly one in-use page; dirty_mask is a subset of
 * free_mask; a segment is in the map exactly while it is owned or abandoned. */
#include <pthread.h>
#include <string.h>

#include "internal.h"

_Atomic(uint8_t) segment_map[SEGMENT_MAP_LENGTH];

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
struct segment *abandoned_segments;
static struct segment *cache_head;
static size_t cache_count;

#define ALL_DATA_SLICES (~(uint64_t)1) /* slice 0 holds the header */

static void map_set(struct segment *segment, uint8_t value)
{
    atomic_store_explicit(&segment_map[(uintptr_t)segment >> SEGMENT_SHIFT], value,
                          memory_order_release);
}

static struct segment *segment_new(struct heap *heap)
{
    pthread_mutex_lock(&cache_lock);
    struct segment *segment = cache_head;
    if (segment != NULL) {
        cache_head = segment->next;
        cache_count--;
    }
    pthread_mutex_unlock(&cache_lock);
    if (segment == NULL) {
        segment = os_map_aligned(SEGMENT_SIZE, SEGMENT_SIZE);
        if (segment == NULL)
            return NULL;
        /* 64 KiB slices are purged one by one: huge pages would be split
         * (or keep whole 2 MiB resident), so they are opt-in. */
        os_huge_pages(segment, SEGMENT_SIZE, strata_options.thp);
    }
    memset(segment, 0, sizeof *segment);
    memset(segment->class_of_slice, CLASS_NONE, sizeof segment->class_of_slice);
    segment->free_mask = ALL_DATA_SLICES;
    atomic_store_explicit(&segment->owner, heap->owner_word, memory_order_relaxed);
    segment->next = heap->segments;
    if (heap->segments)
        heap->segments->prev = segment;
    heap->segments = segment;
    map_set(segment, 1);
    return segment;
}

static uint64_t runs_of(uint64_t mask, size_t length)
{
    for (size_t i = 1; i < length; i++)
        mask &= mask >> 1;
    return mask;
}

struct page *page_new(struct heap *heap, unsigned class_index)
{
    size_t length = class_slices(class_index);
    struct segment *segment = NULL;
    uint64_t starts = 0;
    /* Reuse slices that are still resident, in any segment, before touching
     * purged ones: otherwise free slices pile up unused in later segments
     * while the first ones fault fresh pages in. */
    if (heap->dirty_slices >= length) {
        for (segment = heap->segments; segment != NULL; segment = segment->next) {
            starts = runs_of(segment->dirty_mask, length);
            if (starts)
                break;
        }
    }
    if (segment == NULL) {
        for (segment = heap->segments; segment != NULL; segment = segment->next) {
            starts = runs_of(segment->free_mask, length);
            if (starts)
                break;
        }
    }
    if (segment == NULL) {
        segment = segment_new(heap);
        if (segment == NULL)
            return NULL;
        starts = runs_of(segment->free_mask, length);
    }
    unsigned first = (unsigned)__builtin_ctzll(starts);
    uint64_t run = (length == 64 ? ~(uint64_t)0 : (((uint64_t)1 << length) - 1)) << first;
    bool fresh = (segment->dirty_mask & run) != run;
    heap->dirty_slices -= (size_t)__builtin_popcountll(segment->dirty_mask & run);
    segment->free_mask &= ~run;
    segment->dirty_mask &= ~run;
    segment->aging_mask &= ~run;
    segment->pages_in_use++;
    memset(&segment->page_of_slice[first], (int)first, length);
    memset(&segment->class_of_slice[first], (int)class_index, length);

    struct page *page = &segment->pages[first];
    memset(page, 0, sizeof *page);
    page->start = (char *)segment + (size_t)first * SLICE_SIZE;
    page->block_size = class_size[class_index];
    page->reserved = (uint32_t)(length * SLICE_SIZE / page->block_size);
    page->class_index = (uint8_t)class_index;
    page->slice_count = (uint8_t)length;
    page->in_use = 1;
    page->fresh = fresh;
    return page;
}

bool page_extend(struct page *page)
{
    if (page->capacity == page->reserved)
        return false;
    size_t size = page->block_size;
    /* About an OS page of blocks at a time: carving writes into each. */
    size_t count = 4096 / size;
    if (count < BIN_MIN_BLOCKS)
        count = BIN_MIN_BLOCKS;
    if (count > page->reserved - page->capacity)
        count = page->reserved - page->capacity;
    char *first = page->start + (size_t)page->capacity * size;
    /* Blocks of a page or more are written over their length by nearly every
     * caller: fault fresh memory in with one call instead of a trap a page. */
    size_t os_page = os_page_size();
    if (page->fresh && size >= os_page) {
        uintptr_t from = (uintptr_t)first & ~(os_page - 1);
        uintptr_t to = ((uintptr_t)first + count * size + os_page - 1) & ~(os_page - 1);
        os_populate((void *)from, to - from);
    }
    char *p = first;
    for (size_t i = 1; i < count; i++, p += size)
        ((struct block *)p)->next = (struct block *)(p + size);
    ((struct block *)p)->next = page->free;
    page->free = (struct block *)first;
    page->capacity += (uint32_t)count;
    return true;
}

/* A released page's slices point at the header's page slot, never in use, so
 * a stale free into them is reported even after a new page takes the first
 * slice; their class's bin has no room, so such a free leaves the inline path. */
static void slices_forget(struct segment *segment, unsigned first, unsigned count)
{
    memset(&segment->page_of_slice[first], 0, count);
    memset(&segment->class_of_slice[first], CLASS_NONE, count);
}

static void segment_unlink(struct segment **head, struct segment *segment)
{
    if (segment->prev)
        segment->prev->next = segment->next;
    else
        *head = segment->next;
    if (segment->next)
        segment->next->prev = segment->prev;
    segment->next = segment->prev = NULL;
}

void segment_release_to_os(struct segment *segment)
{
    map_set(segment, 0);
    pthread_mutex_lock(&cache_lock);
    if (cache_count < SEGMENT_CACHE_MAX) {
        segment_purge_dirty(segment);
        segment->next = cache_head;
        cache_head = segment;
        cache_count++;
        segment = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    if (segment != NULL)
        os_unmap(segment, SEGMENT_SIZE);
}

void page_release(struct heap *heap, struct page *page)
{
    struct segment *segment = segment_of(page);
    unsigned first = (unsigned)(page - segment->pages);
    uint64_t run = (((uint64_t)1 << page->slice_count) - 1) << first;
    page->in_use = 0;
    page->free = NULL;
    page->used = 0;
    slices_forget(segment, first, page->slice_count);
    segment->free_mask |= run;
    segment->dirty_mask |= run;
    segment->pages_in_use--;
    heap->dirty_slices += page->slice_count;
    /* An empty segment goes back unless it is the heap's last one. */
    if (segment->pages_in_use == 0 && (segment->prev || segment->next)) {
        heap->dirty_slices -= (size_t)__builtin_popcountll(segment->dirty_mask);
        segment_unlink(&heap->segments, segment);
        segment_release_to_os(segment);
    } else {
        heap_maybe_purge(heap);
    }
}

/* Called by a heap whose thread exits: empty segments go back to the OS, the
 * others are left to the frees of other threads (see free_abandoned). */
void heap_segments_abandon(struct heap *heap)
{
    struct segment *segment = heap->segments;
    heap->segments = NULL;
    heap->dirty_slices = 0;
    while (segment != NULL) {
        struct segment *next = segment->next;
        segment->next = segment->prev = NULL;
        if (segment->pages_in_use == 0) {
            segment_release_to_os(segment);
        } else {
            segment_purge_dirty(segment);
            free_lock_all(); /* the abandoned list is the abandoned lock's */
            segment->next = abandoned_segments;
            if (abandoned_segments)
                abandoned_segments->prev = segment;
            abandoned_segments = segment;
            atomic_store_explicit(&segment->owner, OWNER_ABANDONED, memory_order_release);
            free_unlock_all();
        }
        segment = next;
    }
}

void segment_cache_release(void)
{
    pthread_mutex_lock(&cache_lock);
    struct segment *list = cache_head;
    cache_head = NULL;
    cache_count = 0;
    pthread_mutex_unlock(&cache_lock);
    while (list != NULL) {
        struct segment *next = list->next;
        os_unmap(list, SEGMENT_SIZE);
        list = next;
    }
}

void segment_lock_all(void)
{
    pthread_mutex_lock(&cache_lock);
}

void segment_unlock_all(void)
{
    pthread_mutex_unlock(&cache_lock);
}

void segment_fork_child(void)
{
    pthread_mutex_init(&cache_lock, NULL);
}

bool abandoned_page_release(struct page *page)
{
    struct segment *segment = segment_of(page);
    unsigned first = (unsigned)(page - segment->pages);
    uint64_t run = (((uint64_t)1 << page->slice_count) - 1) << first;
    page->in_use = 0;
    page->free = NULL;
    slices_forget(segment, first, page->slice_count);
    segment->free_mask |= run;
    segment->pages_in_use--;
    if (segment->pages_in_use == 0) {
        segment_unlink(&abandoned_segments, segment);
        segment_release_to_os(segment);
        return true;
    }
    purge_slices(segment, run); /* no owner is left to batch purges */
    return false;
}
