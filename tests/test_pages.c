/* test_pages.c: white-box test of pages and their free lists: blocks come
 * from one page until it is full, frees return them to that page, an empty
 * page goes back to its segment's free slices, the segment map tells strata
 * pointers from others, and dirty slices are purged past the heap's limit. */
#include "check.h"
#include "internal.h"
#include "strata.h"

#include <pthread.h>

#define COUNT 4096

static void *free_elsewhere(void *p)
{
    strata_free(p);
    return NULL;
}

int main(void)
{
    void *first = strata_malloc(48);
    CHECK(first != NULL && is_segment_pointer(first));
    int local;
    CHECK(!is_segment_pointer(&local));
    CHECK(!is_segment_pointer(NULL));

    struct heap *heap = thread_heap;
    CHECK(heap != &heap_empty);
    struct segment *segment = segment_of(first);
    struct page *page = page_of(segment, first);
    CHECK(atomic_load(&page->owner) == heap->owner_word);
    CHECK(page->in_use && page->block_size == 48 && page->used == 1);
    CHECK(heap->current[size_class(48)] == page);
    CHECK(heap->direct[(48 + 7) >> 3] == page);

    /* Fill the page and one more block: the next block opens a new page. */
    static void *blocks[COUNT];
    size_t in_first = page->reserved - 1;
    for (size_t i = 0; i < in_first; i++)
        blocks[i] = strata_malloc(48);
    CHECK(page->used == page->reserved && page->free == NULL);
    CHECK(page->capacity == page->reserved);
    int inside = 1, distinct = 1;
    for (size_t i = 0; i < in_first; i++) {
        char *p = blocks[i];
        if (p < page->start || p >= page->start + SLICE_SIZE ||
            (size_t)(p - page->start) % 48 != 0)
            inside = 0;
        if (i > 0 && p == blocks[i - 1])
            distinct = 0;
    }
    CHECK(inside);
    CHECK(distinct);
    void *other = strata_malloc(48);
    struct page *second = page_of(segment_of(other), other);
    CHECK(second != page && heap->current[size_class(48)] == second);

    /* A full page gets a free block back: it joins its class's list. */
    strata_free(blocks[0]);
    CHECK(page->used == page->reserved - 1 && page->listed);
    CHECK(heap->available[size_class(48)] == page);
    CHECK(page->free == blocks[0]);

    /* Emptying a page that is not current returns its slices. */
    unsigned slice = (unsigned)(page - segment->pages);
    for (size_t i = 1; i < in_first; i++)
        strata_free(blocks[i]);
    CHECK(page->in_use == 1);
    strata_free(first);
    CHECK(page->in_use == 0 && atomic_load(&page->owner) == 0);
    CHECK((segment->free_mask >> slice) & 1);
    CHECK(heap->available[size_class(48)] == NULL);
    strata_free(other);

    /* Freed slices beyond the dirty limit are purged in one batch. */
    size_t count = (HEAP_DIRTY_LIMIT + 4) * (SLICE_SIZE / 1024);
    void **many = strata_malloc(count * sizeof *many);
    for (size_t i = 0; i < count; i++)
        many[i] = strata_malloc(1000);
    for (size_t i = 0; i < count; i++)
        strata_free(many[i]);
    CHECK(heap->dirty_slices <= HEAP_DIRTY_LIMIT);
    strata_free(many);

    /* Allocating and freeing across a page boundary maps nothing new. */
    size_t maps = os_map_count();
    for (int round = 0; round < 1000; round++) {
        for (size_t i = 0; i < 300; i++)
            blocks[i] = strata_malloc(512);
        for (size_t i = 0; i < 300; i++)
            strata_free(blocks[i]);
    }
    CHECK(os_map_count() == maps);

    /* A block freed by another thread waits on the owner's remote list until
     * the owner runs out of blocks in that class. */
    void *shared = strata_malloc(2000);
    struct page *shared_page = page_of(segment_of(shared), shared);
    uint32_t used_before = shared_page->used;
    pthread_t thread;
    pthread_create(&thread, NULL, free_elsewhere, shared);
    pthread_join(thread, NULL);
    CHECK(atomic_load(&heap->remote) == shared);
    CHECK(shared_page->used == used_before);
    while (shared_page->free != NULL)
        blocks[0] = strata_malloc(2000);
    void *after = strata_malloc(2000); /* refill collects the remote list */
    CHECK(after == shared);
    CHECK(atomic_load(&heap->remote) == NULL);
    return check_finish();
}
